"""A real Prefect run of ingest_flow (ephemeral server via the session's prefect_harness)."""

from __future__ import annotations

from pathlib import Path

from agentscaler.artifacts import load_tools
from agentscaler.catalog import Catalog
from agentscaler.workspace import Workspace
from flows.ingest import ingest_flow

CORPORA = Path(__file__).resolve().parents[1] / "data" / "corpora"


def test_ingest_flow_runs_and_records_counts(prefect_harness, tmp_path):
    ws = Workspace(tmp_path / "ws")
    sources = [str(CORPORA / d) for d in ("openai", "mcp", "tau2")] + [str(CORPORA / "bad" / "truncated.json")]
    report = ingest_flow(str(ws.root), sources)
    assert report["ok"] and report["accepted"] == 7
    assert report["rejected"] == {"invalid_schema": 1, "malformed_json": 1}
    assert len(load_tools(ws.tools_path)) == 7
    cat = Catalog(ws.catalog_path)
    runs = [r for r in cat.runs() if r["flow"] == "ingest"]
    assert len(runs) == 1 and runs[0]["status"] == "done" and runs[0]["summary"]["accepted"] == 7
    counts = cat.counts(report["run_id"])["ingest"]
    assert counts["accepted"] == 7 and counts["rejected.malformed_json"] == 1 and counts["source.tau2"] == 3
    again = ingest_flow(str(ws.root), sources)  # re-run: nothing new, nothing duplicated
    assert again["new"] == 0 and len(load_tools(ws.tools_path)) == 7
