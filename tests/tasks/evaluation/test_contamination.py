"""Contamination flags against real tau2 test tasks (and BFCL items)."""

from __future__ import annotations

import json

from agentscaler.artifacts import contaminated_ids
from agentscaler.models import GoldCall, Scenario
from agentscaler.workspace import Workspace, atomic_write_jsonl
from tasks.evaluation.contamination import call_atoms, check_contamination, find_contamination, jaccard, tau2_references


def _scenario(sid: str, intent: str, calls: list[tuple[str, dict]], split: str = "train") -> Scenario:
    return Scenario(id=sid, domain="dtest", read_only=False, intent=intent, split=split, gold_hash="g", seed_hash="s",
                    gold_calls=[GoldCall(name=n, arguments=a) for n, a in calls])


def _cases():
    ref = next(r for r in tau2_references() if r["id"].startswith("retail/") and r["calls"])
    ref_task = json.loads((__import__("envs.tau2.source", fromlist=["data_dir"]).data_dir("retail") / "tasks.json")
                          .read_text())
    task = next(t for t in ref_task if f"retail/{t['id']}" == ref["id"])
    actions = [(a["name"], a["arguments"]) for a in task["evaluation_criteria"]["actions"]]
    return [
        _scenario("copy_intent", ref["intent"], [("list_pets", {"owner": "zed"})]),
        _scenario("copy_calls", "Please book me a table for two at a sushi restaurant tonight.", actions),
        _scenario("clean", "Add a new recipe for lemon cake with three eggs to my cookbook.",
                  [("add_recipe", {"title": "lemon cake", "eggs": 3})]),
    ]


def test_flags_copies_not_unrelated_scenarios():
    flags = {f["scenario"]: f for f in find_contamination(_cases(), tau2_references())}
    assert flags["copy_intent"]["kind"] == "intent" and flags["copy_intent"]["similarity"] >= 0.99
    assert flags["copy_calls"]["kind"] == "calls_exact"
    assert "clean" not in flags
    assert jaccard(call_atoms([("f", {"id": "a"})]), call_atoms([("f", {"id": "b"})])) < 0.5


def test_check_writes_flags_and_export_filter(tmp_path):
    ws = Workspace(tmp_path / "ws")
    assert contaminated_ids(ws) == set()
    d = ws.domain_dir("dtest")
    d.mkdir(parents=True)
    atomic_write_jsonl(d / "scenarios.jsonl", [s.model_dump() for s in _cases()])
    (d / "spec.json").write_text("{}")
    rep = check_contamination(ws, sources=("tau2",))
    assert rep["scenarios"] == 3 and rep["flagged"] == 2 and rep["references"]["tau2"] > 50
    assert contaminated_ids(ws) == {"copy_intent", "copy_calls"}
    strict = check_contamination(ws, sources=("tau2",), intent_threshold=1.01)
    assert strict["flagged"] == 1  # threshold is configurable: only the exact call copy is left


def test_check_is_cached_by_content_and_the_export_refuses_unscreened_scenarios(tmp_path):
    """The check is skipped when it already screened the same scenarios with the same settings; the
    export refuses a workspace that was never screened, or whose scenarios changed since, and names
    the command to run."""
    import pytest

    from agentscaler.artifacts import unscreened
    from tasks.sft.export import UnscreenedError, export_sft

    ws = Workspace(tmp_path / "ws")
    d = ws.domain_dir("dtest")
    d.mkdir(parents=True)
    (d / "spec.json").write_text("{}")
    atomic_write_jsonl(d / "scenarios.jsonl", [s.model_dump() for s in _cases()])
    with pytest.raises(UnscreenedError, match="never screened.*`agentscaler contamination`"):
        export_sft(ws, tokenizer=object())
    first = check_contamination(ws, sources=("tau2",))
    assert first["skipped"] is False and unscreened(ws) is None
    again = check_contamination(ws, sources=("tau2",))
    assert again["skipped"] is True and again["flags"] == first["flags"]
    assert check_contamination(ws, sources=("tau2",), calls_threshold=0.9)["skipped"] is False  # other settings

    changed = _cases()
    changed[2] = changed[2].model_copy(update={"intent": "Delete my cookbook."})  # same id, a new text to screen
    atomic_write_jsonl(d / "scenarios.jsonl", [s.model_dump() for s in changed])
    assert "changed since the last contamination check" in unscreened(ws)
    with pytest.raises(UnscreenedError, match="changed since"):
        export_sft(ws, tokenizer=object())
    assert check_contamination(ws, sources=("tau2",))["skipped"] is False and unscreened(ws) is None


def test_export_command_names_the_missing_check(tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    ws = Workspace(tmp_path / "ws")
    res = CliRunner().invoke(app, ["export", "--json", "--workspace", str(ws.root)])
    assert res.exit_code == 1 and "agentscaler contamination" in res.output and not res.stdout.startswith("{")
