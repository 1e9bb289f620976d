"""`demo --minutes` sizes the run (flows/demo.py): the plan is priced by the cost model, fits the budget,
grows with it, is the default demo at 20 minutes, and a budget below the smallest run is refused
before anything starts. (The demo itself takes ~20 minutes: `make demo`, not a test.)"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.demo import DEMO, MINIMUM, demo_plan, plan_seconds

KNOBS = ("rollout_domains", "gold_replay_domains", "eval_max_scenarios")


def _domains(plan: dict) -> int:
    return plan["domains_limit"] or 10**6  # None: every domain


def test_twenty_minutes_is_the_default_demo():
    plan = demo_plan(20)
    assert {k: plan[k] for k in (*KNOBS, "domains_limit")} == {k: DEMO[k] for k in (*KNOBS, "domains_limit")}
    assert plan_seconds(plan) <= 20 * 60


@pytest.mark.parametrize("small,large", [(9, 12), (12, 20), (20, 30), (30, 90)])
def test_a_larger_budget_never_plans_less(small, large):
    a, b = demo_plan(small), demo_plan(large)
    assert plan_seconds(a) <= small * 60 and plan_seconds(b) <= large * 60
    assert all(b[k] >= a[k] for k in KNOBS) and _domains(b) >= _domains(a)
    assert plan_seconds(b) > plan_seconds(a)


def test_too_small_a_budget_is_refused_before_anything_runs(tmp_path):
    from flows.cli import app

    with pytest.raises(ValueError, match="at least"):
        demo_plan(plan_seconds({**DEMO, **MINIMUM}) / 60 - 1)
    res = CliRunner().invoke(app, ["demo", "--minutes", "3", "--workspace", str(tmp_path / "ws")])
    assert res.exit_code == 2 and "the demo needs at least" in res.output
    assert not (tmp_path / "ws" / "corpus" / "tools.parquet").exists()
