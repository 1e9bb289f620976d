"""Acceptance of rejection sampling (tasks.rollouts.rejection) on hand-made trajectories: our own counting."""

from __future__ import annotations

from agentscaler.models import GOLD_REPLAY, GoldCall, Scenario, Trajectory, Verdict
from tasks.rollouts.rejection import acceptance, acceptance_markdown


def _scenario(sid: str, domain: str, calls: int, split: str = "train") -> Scenario:
    gold = [GoldCall(name="get_order", arguments={"order_id": f"o{i}"}, kind="read", output=None) for i in range(calls)]
    return Scenario(id=sid, domain=domain, read_only=True, intent="x", gold_calls=gold, gold_hash="h", seed_hash="h",
                    split=split)


def _traj(sid: str, domain: str, trial: int, passed: bool | None, model: str = "m") -> Trajectory:
    return Trajectory(id=f"{sid}-{trial}-{model}", run_id="r", scenario_id=sid, domain=domain, trial=trial,
                      messages=[], agent_model=model,
                      verdict=None if passed is None else Verdict(passed=passed, attribution="none" if passed
                                                                  else "agent"))


def test_acceptance_per_domain_and_length_without_gold_or_heldout():
    scenarios = {s.id: s for s in (_scenario("a", "d1", 1), _scenario("b", "d1", 2), _scenario("c", "d2", 1),
                                   _scenario("h", "d3", 1, "heldout"))}
    trajs = [_traj("a", "d1", 0, True), _traj("a", "d1", 1, False), _traj("b", "d1", 0, False),
             _traj("b", "d1", 1, False), _traj("c", "d2", 0, True), _traj("c", "d2", 1, True),
             _traj("c", "d2", 2, None), _traj("h", "d3", 0, True), _traj("a", "d1", 0, True, GOLD_REPLAY)]
    acc = acceptance(trajs, scenarios)
    assert acc["overall"] == {"samples": 6, "accepted": 3, "rate": 0.5, "scenarios": 3, "scenarios_accepted": 2}
    assert acc["by_domain"]["d1"] == {"samples": 4, "accepted": 1, "rate": 0.25, "scenarios": 2,
                                      "scenarios_accepted": 1}
    assert acc["by_length"]["1"]["accepted"] == 3 and acc["by_length"]["2"]["rate"] == 0.0
    assert acc["unverified"] == 1 and acc["heldout_skipped"] == 1 and acc["agent_models"] == ["m"]
    md = "\n".join(acceptance_markdown(acc))
    assert "3/6 samples (50.0%)" in md and "| d1 | 4 | 1 | 25.0% | 1/2 |" in md and "| 2 | 2 | 0 | 0.0% | 0/1 |" in md
