"""Synthesized observers: a complaints desk whose corpus excerpt files and closes complaints but
has no read of them gets `get_complaint(complaint_id)`, marked as not from the corpus; it shows the
writes' effect, and scenarios and verification treat it like any read (real sandbox, real SQLite)."""

from __future__ import annotations

import pytest

from agentscaler.artifacts import load_scenarios
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec
from tasks.environments.play import play_calls
from tasks.environments.synthesize import synthesize_domain
from tasks.evaluation.report import funnel
from tasks.rollouts.gold import gold_trajectory
from tasks.scenarios.build import build_scenarios
from tasks.verify.replay import Replayer
from tasks.verify.verify import verify_trajectories

UNSAFE = unsafe_from_env()


def _tool(name: str, description: str, props: dict, required: list[str]) -> Tool:
    return Tool(name=name, source_name=name, source="openai", description=description,
                parameters={"type": "object", "properties": props, "required": required}).with_id()


TOOLS = [
    _tool("file_complaint", "File a complaint about a store.",
          {"store_id": {"type": "string", "description": "The store complained about."},
           "text": {"type": "string", "description": "What went wrong."}}, ["store_id", "text"]),
    _tool("close_complaint", "Close a complaint once it is resolved.",
          {"complaint_id": {"type": "string", "description": "The complaint to close."}}, ["complaint_id"]),
    _tool("search_stores", "Search for stores by city.", {"city": {"type": "string", "description": "City."}}, []),
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("desk"))
    synthesize_domain(ws, {"domain": "desk", "tools": [t.id for t in TOOLS], "names": [t.name for t in TOOLS]},
                      TOOLS, unsafe=UNSAFE)
    build_scenarios(ws, "desk", per_domain=16, max_length=3, seed=0, unsafe=UNSAFE)
    return ws


def test_a_written_record_no_read_is_about_gets_a_marked_observer(ws: Workspace):
    spec = DomainSpec.load(ws.domain_dir("desk"))
    obs = [t for t in spec.tools if t.origin == "synthesized"]
    assert [t.name for t in obs] == ["get_complaint"] and obs[0].kind == "read"
    assert obs[0].parameters["required"] == ["complaint_id"] and obs[0].source_tool_id is None
    assert {t.name for t in spec.tools if t.origin == "corpus"} == {t.name for t in TOOLS}
    assert spec.report["plans"]["get_complaint"]["origin"] == "synthesized"
    assert spec.report["plans"]["get_complaint"]["action"] == "get"
    assert "origin" not in spec.report["plans"]["file_complaint"]
    assert spec.report["observers"]["synthesized"] == ["get_complaint"]
    # stores are read by the corpus's own search: no observer for them
    assert not any(t.name.startswith("get_store") for t in spec.tools)
    counts = funnel(ws)  # counted apart in the funnel
    assert counts["synthesized_observers"] == 1 and counts["environment_tools"] == len(TOOLS) + 1


def test_the_observer_shows_the_writes_and_is_counted_apart(ws: Workspace):
    spec = DomainSpec.load(ws.domain_dir("desk"))
    store = spec.report and play_calls(ws, "desk", [{"name": "search_stores", "arguments": {}}],
                                       unsafe=UNSAFE)["results"][0]["content"][0]["store_id"]
    out = play_calls(ws, "desk", [{"name": "file_complaint", "arguments": {"store_id": store, "text": "cold"}}],
                     unsafe=UNSAFE)
    cid = out["results"][0]["content"]["complaint_id"]
    out = play_calls(ws, "desk", [
        {"name": "get_complaint", "arguments": {"complaint_id": cid}},  # not there on the seed
        {"name": "file_complaint", "arguments": {"store_id": store, "text": "cold"}},
        {"name": "get_complaint", "arguments": {"complaint_id": cid}},
        {"name": "close_complaint", "arguments": {"complaint_id": cid}},
        {"name": "get_complaint", "arguments": {"complaint_id": cid}}], unsafe=UNSAFE)
    r = out["results"]
    assert not r[0]["ok"] and "not found" in r[0]["error"]
    assert r[2]["ok"] and r[2]["content"]["text"] == "cold" and r[2]["content"]["store_id"] == store
    assert r[3]["ok"] and r[4]["content"] != r[2]["content"]  # the closing shows
    q = spec.report["quality"]
    assert q["writes"] == 2 and q["observers"] == 1
    assert q["write_observability"] == 0.0  # the corpus's reads alone show neither write
    assert q["write_observability_with_observers"] == 1.0, q["unobserved_with_observers"]
    assert set(q["unobserved"].values()) == {"no read about ['complaints'] in the domain"}


def test_scenarios_and_verification_treat_the_observer_like_any_read(ws: Workspace):
    spec = DomainSpec.load(ws.domain_dir("desk"))
    scen = load_scenarios(ws, "desk")
    used = [s for s in scen if any(c.name == "get_complaint" for c in s.gold_calls)]
    assert used, [[c.name for c in s.gold_calls] for s in scen]
    assert all(c.kind == "read" for s in used for c in s.gold_calls if c.name == "get_complaint")
    schemas = [t.openai_schema() for t in spec.tools]
    assert any(s["function"]["name"] == "get_complaint" for s in schemas)
    env = Environment.open(ws.domain_dir("desk"), unsafe=UNSAFE)
    try:
        trajs = [gold_trajectory(s, env, schemas, "system", "t") for s in scen]
        with Replayer(ws.root / "domains", envs={"desk": env}) as rp:
            verify_trajectories(ws, trajs, replayer=rp)
    finally:
        env.close()
    assert all(t.verdict.passed for t in trajs), [(t.verdict.reasons) for t in trajs if not t.verdict.passed]


LAWSUITS = [
    _tool("file_lawsuit", "File a lawsuit against a defendant.",
          {"plaintiff": {"type": "string", "description": "Who sues."},
           "defendant": {"type": "string", "description": "Who is sued."}}, ["plaintiff", "defendant"]),
    _tool("lawsuit_info", "Retrieves details of a lawsuit given a case number.",
          {"case_number": {"type": "string", "description": "The case number of the lawsuit."}}, ["case_number"]),
]


def test_a_create_assigns_what_a_read_looks_its_records_up_by(tmp_path):
    """lawsuit_info finds lawsuits only by case number, which file_lawsuit is not given: filing
    numbers the case (the new record's id), so the corpus's own read shows the filed lawsuit and
    no observer is needed."""
    ws = Workspace(tmp_path)
    spec = synthesize_domain(ws, {"domain": "court", "tools": [t.id for t in LAWSUITS],
                                  "names": [t.name for t in LAWSUITS]}, LAWSUITS, unsafe=UNSAFE)
    assert not [t for t in spec.tools if t.origin == "synthesized"]
    out = play_calls(ws, "court", [
        {"name": "file_lawsuit", "arguments": {"plaintiff": "Ada", "defendant": "Bob"}}], unsafe=UNSAFE)
    new = out["results"][0]["content"]
    assert new["case_number"] == new["lawsuit_id"]
    out = play_calls(ws, "court", [
        {"name": "file_lawsuit", "arguments": {"plaintiff": "Ada", "defendant": "Bob"}},
        {"name": "lawsuit_info", "arguments": {"case_number": new["case_number"]}}], unsafe=UNSAFE)
    assert [r["lawsuit_id"] for r in out["results"][1]["content"]] == [new["lawsuit_id"]]
    assert spec.report["quality"]["write_observability"] == 1.0, spec.report["quality"]["unobserved"]
