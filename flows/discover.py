"""The discover flow: tools -> tool graph -> domains (graph/domains.json), with the run in the catalog."""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import flow, task

from agentscaler.artifacts import load_domains
from agentscaler.catalog import Catalog
from agentscaler.endpoints import serve
from agentscaler.errors import transient_only
from agentscaler.llm import LLMClient
from agentscaler.workspace import Workspace
from flows.common import cell, publish_markdown, run_record
from tasks.discover.check import LLMDependencyChecker
from tasks.discover.config import DiscoverConfig
from tasks.discover.current import record_domains
from tasks.discover.discover import discover
from tasks.environments.plan import tool_reading


# One batch: the whole corpus (community detection needs every tool at once).
@task(name="discover", retries=1, retry_delay_seconds=1, retry_condition_fn=transient_only, tags=["discover"])
def discover_task(ws_root: str, config: dict[str, Any] | None = None, force: bool = False,
                  llm_check: bool = False, llm: str | None = None, model: str = "smollm2-135m") -> dict[str, Any]:
    ws = Workspace(ws_root)
    cfg = DiscoverConfig(**(config or {}))
    if not llm_check:
        return discover(ws, cfg=cfg, force=force, reading=tool_reading)
    with serve(llm, log_path=ws.reports_dir / "llm-server.log") as urls:
        client = LLMClient(urls, model=model, timeout=300, cache_path=ws.cache_dir / "llm.sqlite")
        try:
            return discover(ws, cfg=cfg, force=force, checker=LLMDependencyChecker(client), reading=tool_reading)
        finally:
            asyncio.run(client.aclose())


@flow(name="discover", log_prints=False)
def discover_flow(workspace: str, embedding: str = "fast", threshold: float | None = None,
                  method: str = "louvain", resolution: float = 1.0, max_size: int = 40,
                  force: bool = False, llm_check: bool = False, llm: str | None = None,
                  model: str = "smollm2-135m", **options: Any) -> dict[str, Any]:
    """Build the tool graph and the domains of the workspace's corpus.

    With llm_check, an LLM (`llm`: URL(s), else AGENTSCALER_LLM_URL, else the local server) checks
    each domain's dependencies after the rules; its cost is in the summary as "llm_check".
    Every domain is marked `discover=done` in the catalog (artifact = hash of its record); the
    run records counts (tools, domains, kept, dropped, edges by kind)."""
    ws = Workspace(workspace)
    cfg = DiscoverConfig(embedding=embedding, threshold=threshold, method=method, resolution=resolution,
                         max_size=max_size, **options)  # validated here: a typo fails before any work
    catalog = Catalog(ws.catalog_path)
    params = cfg.model_dump() | ({"llm_check": True, "llm": llm, "model": model} if llm_check else {})
    with run_record(catalog, "discover", params) as summary:
        summary.update(discover_task(str(ws.root), cfg.model_dump(), force, llm_check, llm, model))
        records = load_domains(ws)
        record_domains(catalog, summary["run_id"], summary, records)
        publish_markdown("discover", _markdown(summary, records), f"{summary['domains']} domains")
    return dict(summary)


def _markdown(summary: dict[str, Any], records: list[dict[str, Any]], shown: int = 30) -> str:
    """The run's artifact: the graph's totals and the largest domains with their first tool names."""
    edges = summary["edges"]
    lines = ["# discover", "", "| tools | kept | dropped | domains | similar edges | data-flow edges | modularity |",
             "|---|---|---|---|---|---|---|",
             f"| {summary['tools']} | {summary['kept_tools']} | {summary['dropped']} | {summary['domains']} | "
             f"{edges.get('similar')} | {edges.get('dataflow')} | {summary.get('modularity', '')} |", "",
             f"## the {min(shown, len(records))} largest of {len(records)} domains", "",
             "| domain | tools | first tool names |", "|---|---|---|"]
    for rec in sorted(records, key=lambda r: (-len(r["tools"]), r["domain"]))[:shown]:
        lines.append(f"| `{rec['domain']}` | {len(rec['tools'])} | {cell(', '.join(rec.get('names', [])[:5]))} |")
    return "\n".join(lines) + "\n"
