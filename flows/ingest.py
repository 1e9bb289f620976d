"""The ingest flow: one Prefect task that builds corpus/tools.parquet, with the run in the catalog."""

from __future__ import annotations

from typing import Any

from prefect import flow, task

from agentscaler.catalog import Catalog
from agentscaler.workspace import Workspace
from flows.common import publish_markdown, run_record
from tasks.corpus.ingest import ingest


@task(name="ingest-corpus", retries=0, tags=["ingest"])
def ingest_task(workspace: str, sources: list[str], fmt: str = "auto", strict: bool = False,
                add_returns: bool = False) -> dict[str, Any]:
    """One batch: the whole ingest (no retries: retrying does not fix bad input)."""
    return ingest(Workspace(workspace), sources, fmt=fmt, strict=strict, add_returns=add_returns)


@flow(name="ingest", log_prints=False)
def ingest_flow(workspace: str, sources: list[str], fmt: str = "auto", strict: bool = False,
                add_returns: bool = False) -> dict[str, Any]:
    """Ingest corpus files (paths or corpus names bfcl|tau2|nestful) into the workspace.

    The run and its counts (accepted, rejected by reason, per source) go to the catalog."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    params = {"sources": [str(s) for s in sources], "fmt": fmt, "strict": strict, "add_returns": add_returns}
    with run_record(catalog, "ingest", params) as summary:
        report = ingest_task(str(ws.root), [str(s) for s in sources], fmt, strict, add_returns)
        counts = {"accepted": report["accepted"], "new": report["new"], "total": report["total"]}
        counts.update({f"rejected.{k}": v for k, v in report["rejected"].items()})
        counts.update({f"source.{k}": v for k, v in report["sources"].items()})
        catalog.set_counts(summary["run_id"], "ingest", counts)
        summary.update({k: report[k] for k in ("accepted", "rejected", "sources", "new", "total", "errors_total", "ok")})
        if not report["ok"]:
            summary["status"] = "failed"
        publish_markdown("ingest", _markdown(report), f"{report['accepted']} tools accepted")
    report["run_id"] = summary["run_id"]
    return report


def _markdown(report: dict[str, Any]) -> str:
    """The run's artifact: what was kept, from where, and what was rejected and why."""
    lines = ["# ingest", "", "| accepted | new | total in the corpus | read errors |", "|---|---|---|---|",
             f"| {report['accepted']} | {report['new']} | {report['total']} | {report['errors_total']} |", "",
             "## accepted per source", "", "| source | tools |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report["sources"].items())]
    lines += ["", "## rejected by reason", "", "| reason | tools |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report["rejected"].items(), key=lambda kv: -kv[1])] or ["| none | 0 |"]
    return "\n".join(lines) + "\n"
