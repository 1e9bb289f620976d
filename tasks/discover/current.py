"""Whether the discover stage's output is current, and a discover run's catalog rows: the light
part of the stage (no graph, embedding or plotting libraries), so the command line can answer an
unchanged corpus without them or Prefect (tasks.discover.discover runs the stage itself)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agentscaler.catalog import Catalog
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace
from tasks.discover.config import DiscoverConfig


def file_key(ws: Workspace, cfg: DiscoverConfig, checker: Any = None) -> str:
    """The workspace corpus file's bytes and the config (cfg resolved) as one key."""
    if not ws.tools_path.exists():
        raise FileNotFoundError(f"no tool corpus at {ws.tools_path}: run the ingest stage first")
    return content_hash({"corpus_sha256": hashlib.sha256(ws.tools_path.read_bytes()).hexdigest(),
                         "config": cfg.model_dump(), "checker": type(checker).__name__ if checker else None})


def unchanged_summary(ws: Workspace, cfg: DiscoverConfig | None = None) -> dict[str, Any] | None:
    """What discover(ws, cfg=cfg) (rules only, the workspace's corpus) would return without any
    work: the last run's summary (skipped: True) when the corpus file and config are those it
    recorded, else None. The command line asks this before it starts Prefect for a run with
    nothing to do (issue 20 aim 6: a warm run in seconds; Prefect's start is most of a no-op)."""
    cfg = (cfg or DiscoverConfig()).resolved()
    old = current_report(ws, ws.graph_dir / "report.json", False)
    if old is None or old.get("file_key") != file_key(ws, cfg):
        return None
    return {**old["summary"], "skipped": True}


def record_domains(catalog: Catalog, run_id: str, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """A discover run's catalog rows: every domain found marked discover=done (artifact = the hash
    of its record, one transaction) and the run's counts."""
    catalog.mark_many([rec["domain"] for rec in records], "discover", "done",
                      artifacts=[content_hash(rec) for rec in records])
    catalog.set_counts(run_id, "discover", {
        "tools": summary["tools"], "domains": summary["domains"], "kept_tools": summary["kept_tools"],
        "dropped": summary["dropped"], "edges.similar": summary["edges"]["similar"],
        "edges.dataflow": summary["edges"]["dataflow"]})


def current_report(ws: Workspace, report_path: Path, force: bool) -> dict[str, Any] | None:
    """The last run's graph/report.json when its domains are on disk (None with force, or unreadable)."""
    if force or not ws.domains_path.exists() or not report_path.exists():
        return None
    try:
        return json.loads(report_path.read_text())
    except (OSError, ValueError):
        return None
