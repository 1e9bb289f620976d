"""`demo --minutes` sizes the run (flows/demo.py): the plan is priced by the cost model, fits the budget,
grows with it, is the default demo at 15 minutes (issue 20's aim), evaluates a few short-prompt domains,
and a budget below the smallest run is refused before anything starts. (The demo itself takes ~15
minutes: `make demo`, not a test; the pipeline's comparison path is tests/flows/test_pipeline.py.)"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import math

from flows.demo import DEMO, EVAL_PER_DOMAIN, MINIMUM, demo_plan, plan_seconds

KNOBS = ("rollout_domains", "gold_replay_domains", "eval_max_scenarios", "train_budget_minutes")
SMALLEST = math.ceil(plan_seconds({**DEMO, **MINIMUM}) / 60)  # minutes


def _domains(plan: dict) -> int:
    return plan["domains_limit"] or 10**6  # None: every domain


def test_fifteen_minutes_is_the_default_demo():
    plan = demo_plan(15)
    keys = (*KNOBS, "domains_limit", "eval_max_domains", "train_stages", "k")
    assert {k: plan[k] for k in keys} == {k: DEMO[k] for k in keys}
    assert plan_seconds(plan) <= 15 * 60
    # the comparison: the same scenarios for both models, a few held-out domains with short prompts
    assert plan["eval_max_scenarios"] >= 12 and plan["eval_max_domains"] >= 3 and plan["k"] >= 2
    assert plan["train_budget_minutes"] and plan["max_steps"] is None  # training sized by wall time


@pytest.mark.parametrize("minutes", [SMALLEST, 15, 30, 90])
def test_the_evaluation_takes_a_few_domains_a_few_scenarios_each(minutes):
    plan = demo_plan(minutes)
    assert plan["eval_max_domains"] == max(plan["eval_domains"], math.ceil(plan["eval_max_scenarios"] / EVAL_PER_DOMAIN))


@pytest.mark.parametrize("small,large", [(SMALLEST, 12), (12, 15), (15, 30), (30, 90)])
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
