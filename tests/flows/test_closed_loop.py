"""Closed-loop pieces that run without a model: gold replay through the real sandbox and verifier,
domain choice, and the report table. (The whole loop is benchmarks/closed_loop.py: minutes of CPU.)"""

from __future__ import annotations

import json

from agentscaler.artifacts import load_scenarios, load_trajectories
from agentscaler.workspace import Workspace
from flows.closed_loop import choose_domains, gold_replay_run, markdown
from tasks.rollouts.gold import GOLD_AGENT
from tasks.scenarios.build import build_scenarios, domain_split
from tests.conftest import load_shop_builder


def test_gold_replay_builds_verified_labelled_trajectories(tmp_path):
    ws = Workspace(tmp_path / "ws")
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=4, seed=0, heldout_fraction=0.0)
    scenarios = [s for s in load_scenarios(ws, "shop") if s.split == "train"]
    assert scenarios
    rep = gold_replay_run(ws, ["shop"], run_id="gold")
    assert rep["written"] == len(scenarios) and rep["errors"] == []
    assert rep["passed"] == rep["written"], rep
    trajs = load_trajectories(ws, "gold")
    by_id = {s.id: s for s in scenarios}
    for t in trajs:
        s = by_id[t.scenario_id]
        assert t.agent_model == GOLD_AGENT and t.verdict is not None and t.verdict.passed
        assert t.messages[1] == {"role": "user", "content": s.intent}
        calls = [tc["function"] for m in t.messages if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [(g.name, g.arguments) for g in s.gold_calls]
        assert t.final_hash == s.gold_hash
        assert t.messages[-2]["role"] == "assistant" and t.messages[-2]["content"].startswith("Done.")


def test_gold_replay_of_a_wrong_gold_call_fails_verification(tmp_path):
    """A tampered scenario (different arguments than its gold hash) is rejected like any trajectory."""
    ws = Workspace(tmp_path / "ws")
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=4, seed=0, heldout_fraction=0.0)
    path = ws.domain_dir("shop") / "scenarios.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    victim = next(r for r in rows if not r["read_only"])
    victim["gold_hash"] = "0" * 64
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = gold_replay_run(ws, ["shop"], run_id="gold")
    assert rep["passed"] == rep["written"] - 1


def test_choose_domains_prefers_small_domains_per_split():
    recs = [{"domain": f"d{i:02d}", "tools": [f"t{j}" for j in range(2 + i % 7)]} for i in range(40)]
    recs.append({"domain": "dsingle", "tools": ["only"]})
    train, held = choose_domains(recs, 3, 2, max_tools=4)
    assert all(domain_split(r["domain"]) == "train" for r in train)
    assert all(domain_split(r["domain"]) == "heldout" for r in held) and held
    assert "dsingle" not in {r["domain"] for r in train + held}
    sizes = [len(r["tools"]) for r in train]
    assert sizes == sorted(sizes)


def test_markdown_reports_both_models_side_by_side():
    side = {"model": "m", "scenarios": 2, "trials": 4, "passed": 1, "pass^k": {"1": 0.25, "2": 0.0},
            "seconds": 3.0, "reasons": {"x": 1}}
    out = {"config": {"k": 2, "temperature": 0.6, "max_turns": 3, "max_tokens": 160},
           "baseline": {**side, "conversations_s": 7.5}, "trained": {**side, "model": "m-sft", "passed": 3, "pass^k": {"1": 0.75, "2": 0.5}},
           "workspace": {"heldout": ["dh"]}, "gold_replay": {"passed": 5, "written": 5},
           "export": {"kept": {"stage1": {"train": 5}}}, "train": {"global_step": 3, "first_loss": 2.0,
                                                                   "last_loss": 1.0, "train_seconds": 9.0},
           "phases_s": {"build": 1.0}}
    md = markdown(out)
    assert "| m (base) | llama.cpp GGUF | 4 | 1 | 0.250 | 0.000 | 3.0 | 7.5 | n/a |" in md
    assert "| m-sft | transformers fp32 (hf_server) | 4 | 3 | 0.750 | 0.500 | 3.0 | n/a | n/a |" in md
    assert "gold-replay" in md and "pass^2" in md
