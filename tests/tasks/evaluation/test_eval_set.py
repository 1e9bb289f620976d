"""The evaluation set (tasks.evaluation.eval_set) on real built domains: held-out only, spread over
domains, single- and multi-call interleaved, the prompt limit applied and written down, and a clear
error when the workspace cannot give what is asked."""

from __future__ import annotations

import pytest

from agentscaler.artifacts import load_scenarios
from agentscaler.workspace import Workspace
from tasks.evaluation.eval_set import EvalSetError, choose_eval_set, load_eval_set, prompt_tokens
from tasks.scenarios.build import build_scenarios
from tests.conftest import load_shop_builder


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("evalset"))
    for name, held in (("shop", 0.0), ("shopa", 1.0), ("shopb", 1.0)):
        load_shop_builder()(ws.domain_dir(name))
        build_scenarios(ws, name, per_domain=6, max_length=3, seed=1, heldout_fraction=held)
    return ws


def test_chosen_from_held_out_domains_evenly_and_written(ws, tokenizer):
    rec = choose_eval_set(ws, scenarios=6, min_domains=2, max_prompt_tokens=100_000, name="t", tokenizer=tokenizer)
    held = {s.id: s for d in ("shopa", "shopb") for s in load_scenarios(ws, d)}
    assert len(rec["scenario_ids"]) == 6 and set(rec["scenario_ids"]) <= set(held)
    assert rec["domains"] == ["shopa", "shopb"]
    per = [sum(held[i].domain == d for i in rec["scenario_ids"]) for d in ("shopa", "shopb")]
    assert per == [3, 3]
    assert rec["single_call"] + rec["multi_call"] == 6 and rec["single_call"] >= 1 and rec["multi_call"] >= 1
    assert load_eval_set(ws, "t") == rec
    again = choose_eval_set(ws, scenarios=6, min_domains=2, max_prompt_tokens=100_000, name="t2", tokenizer=tokenizer)
    assert again["scenario_ids"] == rec["scenario_ids"]  # deterministic


def test_prompt_limit_and_errors(ws, tokenizer):
    n = prompt_tokens(ws, "shopa", tokenizer)
    assert n > 100
    with pytest.raises(EvalSetError, match="held-out domains fit"):
        choose_eval_set(ws, scenarios=2, min_domains=1, max_prompt_tokens=n - 1, name="x", tokenizer=tokenizer)
    with pytest.raises(EvalSetError, match="fewer than the 3 asked for"):
        choose_eval_set(ws, scenarios=2, min_domains=3, max_prompt_tokens=n, name="x", tokenizer=tokenizer)
    with pytest.raises(EvalSetError, match="held-out scenarios in 2 domains, fewer than 500"):
        choose_eval_set(ws, scenarios=500, min_domains=2, max_prompt_tokens=n, name="x", tokenizer=tokenizer)
    with pytest.raises(FileNotFoundError):
        load_eval_set(ws, "missing")


def test_max_domains_takes_the_shortest_prompts(ws, tokenizer):
    """A small evaluation (the demo's) on few domains: the ones with the shortest prompts, each giving
    its share, and the cap written down beside how many domains fitted."""
    rec = choose_eval_set(ws, scenarios=4, min_domains=1, max_prompt_tokens=100_000, name="few", tokenizer=tokenizer,
                          max_domains=1)
    sizes = {d: prompt_tokens(ws, d, tokenizer) for d in ("shopa", "shopb")}
    assert len(rec["domains"]) == 1 and sizes[rec["domains"][0]] == min(sizes.values())
    held = {s.id: s for s in load_scenarios(ws, rec["domains"][0])}
    assert len(rec["scenario_ids"]) == 4 and set(rec["scenario_ids"]) <= set(held)
    assert rec["criteria"]["max_domains"] == 1 and rec["criteria"]["domains_fitting"] == 2
    with pytest.raises(EvalSetError, match="max_domains 1 is below min_domains 2"):
        choose_eval_set(ws, scenarios=4, min_domains=2, max_prompt_tokens=100_000, name="x", tokenizer=tokenizer,
                        max_domains=1)
