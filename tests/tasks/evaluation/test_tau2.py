"""tau2 scoring through our imported retail domain, and agreement with tau2's own evaluator
(tau2 imported in this test process: trusted upstream code from the extracted wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscaler.models import Trajectory
from envs.tau2.build import build_tau2_domain
from envs.tau2.tasks import tau2_scenarios
from tasks.evaluation.tau2 import agent_calls, agreement, communicated, score_trajectory, tau2_criteria


@pytest.fixture(scope="module")
def retail(tmp_path_factory) -> tuple[Path, list]:
    d = tmp_path_factory.mktemp("tau2") / "retail"
    build_tau2_domain("retail", d)
    scenarios, _ = tau2_scenarios("retail", d, limit=30)
    return d, scenarios


def test_communicated_matches_tau2_rule():
    got = communicated(["1,234.5", "refund"], ["Your REFUND of 1234.5 is done"])
    assert got == {"1,234.5": False, "refund": True}  # tau2 strips commas from the message, not the info
    assert communicated(["1234.5"], ["total: 1,234.5"]) == {"1234.5": True}


def test_score_trajectory_db_and_communicate(retail):
    _, scenarios = retail
    crit = tau2_criteria("retail")
    s = next(s for s in scenarios if crit[s.user_facts["tau2_task_id"]]["communicate_info"]) if any(
        crit[s.user_facts["tau2_task_id"]]["communicate_info"] for s in scenarios) else scenarios[0]
    need = crit[s.user_facts["tau2_task_id"]]["communicate_info"]
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "x", "arguments": "{\"a\": 1}"}}]},
            {"role": "assistant", "content": "Done. " + " ".join(need)}]
    t = Trajectory(id="t", run_id="r", scenario_id=s.id, domain=s.domain, messages=msgs, final_hash=s.gold_hash)
    assert score_trajectory(t, s, crit)["passed"]
    assert agent_calls(msgs) == [{"name": "x", "arguments": {"a": 1}}]
    wrong = t.model_copy(update={"final_hash": s.seed_hash})
    assert score_trajectory(wrong, s, crit)["reasons"][0] == "db_mismatch"
    if need:
        silent = t.model_copy(update={"messages": msgs[:2]})
        assert score_trajectory(silent, s, crit)["reasons"] == ["info_not_communicated"]


def test_agreement_with_tau2_evaluator(retail):
    d, scenarios = retail
    writes = [s for s in scenarios if not s.read_only]
    res = agreement("retail", d, writes, sample=1, seed=1)  # gold, drop/mutate a write, reads only
    assert res["cases"] >= 3
    assert res["agreement_rate"] == 1.0, res["disagreements"]
    assert 0 < res["tau2_pass"] < res["cases"]  # both passing and failing sequences were compared
