"""Orchestration on a real Prefect (test harness): per-domain fan-out, a failing domain, retry-failed, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentscaler.artifacts import load_tools, save_tools
from agentscaler.catalog import Catalog
from agentscaler.models import Tool
from agentscaler.workspace import Workspace, atomic_write_json

DATA = Path(__file__).resolve().parents[1] / "data" / "corpora"
BROKEN = {"domain": "dbroken000000", "tools": ["not-in-corpus"], "names": ["lookup_parcel"], "edges": []}


@pytest.fixture(scope="module")
def small_ws(tmp_path_factory) -> Workspace:
    """A workspace with a small real corpus, discovered, plus one domain whose tools are missing."""
    from tasks.corpus.ingest import ingest
    from tasks.discover.discover import discover

    ws = Workspace(tmp_path_factory.mktemp("orch") / "ws")
    report = ingest(ws, [DATA / name for name in ("bfcl", "openai", "tau2", "toolbench", "xlam")])
    assert report["accepted"] > 5
    discover(ws)
    records = json.loads(ws.domains_path.read_text())
    assert records, "discovery found no domains"
    atomic_write_json(ws.domains_path, records + [BROKEN])
    return ws


def _spec_hashes(ws: Workspace) -> dict[str, str]:
    return {d: (ws.domain_dir(d) / "spec.json").read_text() for d in ws.domain_ids()}


def test_failed_domain_isolated_then_retried(small_ws: Workspace, prefect_harness):
    from flows.build_environments import build_environments_flow
    from flows.retry_failed import retry_failed_flow

    ws = small_ws
    records = json.loads(ws.domains_path.read_text())
    good = [r["domain"] for r in records if r["domain"] != BROKEN["domain"]]

    summary = build_environments_flow(str(ws.root), per_domain=4)
    assert set(summary["failed"]) == {BROKEN["domain"]}
    assert summary["built"] == len(good) and summary["scenarios"] > 0
    catalog = Catalog(ws.catalog_path)
    status = {d["domain"]: d for d in catalog.domain_summary()["domains"]}
    assert status[BROKEN["domain"]]["status"] == "failed"
    assert "no" in (status[BROKEN["domain"]]["error"] or "").lower()  # the reason is recorded
    assert all(status[d]["status"] == "done" for d in good)
    before = _spec_hashes(ws)
    attempts_before = {r["domain"]: r["attempts"] for r in catalog.domains(stage="synthesize")}

    # Make the broken domain buildable, then retry only the failed ones.
    tools = load_tools(ws.tools_path)
    parcel = Tool(name="lookup_parcel", source_name="lookup_parcel", source="openai",
                  description="Look up a parcel's delivery status by its tracking number.",
                  parameters={"type": "object", "properties": {"tracking_number": {"type": "string",
                              "description": "The parcel's tracking number."}}, "required": ["tracking_number"]}).with_id()
    save_tools(ws.tools_path, tools + [parcel])
    atomic_write_json(ws.domains_path, records[:-1] + [{**BROKEN, "tools": [parcel.id]}])
    out = retry_failed_flow(str(ws.root), per_domain=4)
    assert out["retried"]["build"] == [BROKEN["domain"]]
    assert out["build"]["failed"] == {}

    attempts_after = {r["domain"]: r["attempts"] for r in catalog.domains(stage="synthesize")}
    assert attempts_after[BROKEN["domain"]] == attempts_before[BROKEN["domain"]] + 1
    assert all(attempts_after[d] == attempts_before[d] for d in good)  # nothing else re-ran
    assert catalog.domain_summary()["counts"] == {"done": len(good) + 1}
    after = _spec_hashes(ws)
    assert {d: after[d] for d in before} == before  # finished environments untouched

    # A full re-run finds everything finished: same artifacts, no duplicate scenarios.
    scen_before = {d: (ws.domain_dir(d) / "scenarios.jsonl").read_bytes() for d in ws.domain_ids()}
    again = build_environments_flow(str(ws.root), per_domain=4)
    assert again["failed"] == {}
    assert {d: (ws.domain_dir(d) / "scenarios.jsonl").read_bytes() for d in ws.domain_ids()} == scen_before
    for d in ws.domain_ids():
        ids = [json.loads(line)["id"] for line in (ws.domain_dir(d) / "scenarios.jsonl").read_text().splitlines()]
        assert len(ids) == len(set(ids))
