"""The ingest flow: one Prefect task that builds corpus/tools.parquet, with the run in the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from agentscaler.catalog import Catalog
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace
from tasks.ingest import ingest_task


@flow(name="ingest", log_prints=False)
def ingest_flow(workspace: str, sources: list[str], fmt: str = "auto", strict: bool = False,
                add_returns: bool = False) -> dict[str, Any]:
    """Ingest corpus files (paths or corpus names bfcl|tau2|nestful) into the workspace.

    The run and its counts (accepted, rejected by reason, per source) go to the catalog."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    params = {"sources": [str(s) for s in sources], "fmt": fmt, "strict": strict, "add_returns": add_returns}
    run_id = "ingest-" + content_hash({**params, "workspace": str(ws.root), "nonce": _nonce()})
    catalog.start_run(run_id, "ingest", params)
    try:
        report = ingest_task(str(ws.root), [str(s) for s in sources], fmt, strict, add_returns)
    except Exception as exc:
        catalog.finish_run(run_id, "failed", {"error": str(exc)[:2000]})
        raise
    counts = {"accepted": report["accepted"], "new": report["new"], "total": report["total"]}
    counts.update({f"rejected.{k}": v for k, v in report["rejected"].items()})
    counts.update({f"source.{k}": v for k, v in report["sources"].items()})
    catalog.set_counts(run_id, "ingest", counts)
    summary = {k: report[k] for k in ("accepted", "rejected", "sources", "new", "total", "errors_total", "ok")}
    catalog.finish_run(run_id, "done" if report["ok"] else "failed", summary)
    report["run_id"] = run_id
    return report


def _nonce() -> str:
    import time

    return str(time.time_ns())


def run_ingest(workspace: Path | str, sources: list[str], **kw: Any) -> dict[str, Any]:
    """Convenience for scripts: run the flow and return its report."""
    return ingest_flow(str(workspace), [str(s) for s in sources], **kw)
