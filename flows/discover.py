"""The discover flow: tools -> tool graph -> domains (graph/domains.json), with the run in the catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow

from agentscaler.catalog import Catalog
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace
from flows.common import run_record
from tasks.discover.domains import DiscoverConfig, discover_task


@flow(name="discover", log_prints=False)
def discover_flow(workspace: str, embedding: str = "fast", threshold: float | None = None,
                  method: str = "louvain", resolution: float = 1.0, max_size: int = 40,
                  force: bool = False, **options: Any) -> dict[str, Any]:
    """Build the tool graph and the domains of the workspace's corpus.

    Every domain is marked `discover=done` in the catalog (artifact = hash of its record); the
    run records counts (tools, domains, kept, dropped, edges by kind)."""
    ws = Workspace(workspace)
    cfg = DiscoverConfig(embedding=embedding, threshold=threshold, method=method, resolution=resolution,
                         max_size=max_size, **options)  # validated here: a typo fails before any work
    catalog = Catalog(ws.catalog_path)
    with run_record(catalog, "discover", cfg.model_dump()) as summary:
        summary.update(discover_task(str(ws.root), cfg.model_dump(), force))
        records = json.loads(ws.domains_path.read_text()) if ws.domains_path.exists() else []
        for rec in records:
            catalog.mark(rec["domain"], "discover", "done", artifact=content_hash(rec))
        catalog.set_counts(summary["run_id"], "discover", {
            "tools": summary["tools"], "domains": summary["domains"], "kept_tools": summary["kept_tools"],
            "dropped": summary["dropped"], "edges.similar": summary["edges"]["similar"],
            "edges.dataflow": summary["edges"]["dataflow"]})
    return dict(summary)


def run_discover(workspace: Path | str, **kw: Any) -> dict[str, Any]:
    """Convenience for scripts: run the flow and return its summary."""
    return discover_flow(str(workspace), **kw)
