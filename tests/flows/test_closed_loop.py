"""The closed loop: gold replay through the real sandbox and verifier, the scaling curve's nested domain
order, and the whole loop end to end on the hand-written shop domain with the tiny model (real TRL
steps, real checkpoint server, real sandbox, scripted user; the tiny model is untrained noise, so
the test is about the loop's plumbing, resumption and reports, not about pass rates).
The SmolLM2 loop itself is benchmarks/closed_loop.py: hours of CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentscaler.artifacts import load_scenarios, load_trajectories
from agentscaler.workspace import Workspace
from benchmarks import run_all
from flows.closed_loop import (ClosedLoopConfig, _logged_steps, closed_loop, gold_replay_run, interim_comparison,
                               trained_on_same_data, progress, scaling_curve, scaling_progress, stage_config, tau2_comparison,
                               swap_model, keyed_model, model_key, train_domains)
from tasks.evaluation.evaluate import eval_path
from tasks.rollouts.gold import GOLD_AGENT
from tasks.scenarios.build import build_scenarios
from tests.conftest import copy_workspace, load_shop_builder
from training.config import StageConfig


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Two copies of the shop domain, built once for the module: one whose scenarios are all train,
    one all held out."""
    ws = Workspace(tmp_path_factory.mktemp("built") / "ws")
    for name, held in (("shop", 0.0), ("shopheld", 1.0)):
        load_shop_builder()(ws.domain_dir(name))
        build_scenarios(ws, name, per_domain=4, seed=0, heldout_fraction=held)
    return ws.root


@pytest.fixture()
def ws(built: Path, tmp_path: Path) -> Workspace:
    """A fresh copy of the built workspace per test (each writes its own runs, or changes scenarios)."""
    return copy_workspace(built, tmp_path)


def test_gold_replay_builds_verified_labelled_trajectories(ws):
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


def test_gold_replay_of_a_wrong_gold_call_fails_verification(ws):
    """A tampered scenario (different arguments than its gold hash) is rejected like any trajectory."""
    path = ws.domain_dir("shop") / "scenarios.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    victim = next(r for r in rows if not r["read_only"])
    victim["gold_hash"] = "0" * 64
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = gold_replay_run(ws, ["shop"], run_id="gold")
    assert rep["passed"] == rep["written"] - 1


def test_train_domains_are_the_train_split_in_a_fixed_order(ws):
    assert train_domains(ws) == ["shop"]


def test_stage_config_is_a_valid_stage_yaml_with_the_memory_settings(tmp_path):
    """The closed loop's training config validates as a StageConfig (extra keys forbidden) and carries
    the memory settings: gradient checkpointing on by default, top-layer training when asked."""
    conf = StageConfig.model_validate(stage_config(ClosedLoopConfig(), tmp_path / "base", tmp_path / "sft",
                                                   tmp_path / "out", None))
    assert conf.gradient_checkpointing and conf.train_top_layers is None and conf.budget_minutes == 90.0
    conf = StageConfig.model_validate(stage_config(ClosedLoopConfig(gradient_checkpointing=False, train_top_layers=10),
                                                   tmp_path / "base", tmp_path / "sft", tmp_path / "out", 7))
    assert (conf.gradient_checkpointing, conf.train_top_layers, conf.max_steps, conf.budget_minutes) == (False, 10, 7, None)


@pytest.mark.slow
def test_closed_loop_end_to_end_with_the_tiny_model(ws):
    cfg = ClosedLoopConfig(base_model="tiny", eval_scenarios=2, eval_domains=1, max_prompt_tokens=4096, k=2,
                           tau2=False, max_turns=1, max_steps=1, max_tokens=24, session_length=2048, max_length=2048,
                           budget_minutes=0.05, eval_every_minutes=0.01, eval_max_rows=2, grad_accum=1, bf16=False,
                           torch_threads=1)
    out = closed_loop(ws, cfg, log=lambda *_: None)
    assert out["eval_set"]["scenarios"] == 2 and out["eval_set"]["domains"] == ["shopheld"]
    assert out["gold_replay"]["passed"] == len([s for s in load_scenarios(ws, "shop") if s.split == "train"])
    assert out["train"]["stopped_by"] == "budget" and out["train"]["curve"]["validation"]
    cmp = out["comparison"]
    assert cmp["same_scenarios"] and cmp["groups"]["overall"]["scenarios"] == 2
    assert out["base"]["heldout"]["cost"]["conversations"] == out["trained"]["heldout"]["cost"]["conversations"] == 4
    assert out["base"]["heldout"]["servers"] == out["trained"]["heldout"]["servers"] == 2  # server_replicas: two one-thread servers each
    conv = out["export"]["conversations_by_origin"]
    assert set(conv["train"]) == {GOLD_AGENT}  # only gold replays: no experience run was given
    md = (ws.reports_dir / "closed_loop.md").read_text()
    assert "| all scenarios (2) | 1 |" in md and "closed_loop_training.png" in md
    assert (ws.reports_dir / "closed_loop_training.png").stat().st_size > 1000
    # the README's closed-loop block renders this run's file (benchmarks/run_all.py --table-only)
    block = run_all.closed_loop_table(ws.reports_dir)
    ev = out["eval_set"]
    assert (f"2 held-out scenarios from 1 held-out domains ({ev['single_call']} single-call, {ev['multi_call']} "
            "multi-call), k = 2") in block
    assert f"| {out['base']['heldout']['model']} | heldout | 4 |" in block and "| all scenarios (2) | 1 |" in block
    # the interim comparison (trials verified in memory) of a finished run is the final one
    interim = interim_comparison(ws, cfg)
    assert interim["scenarios"] == interim["of"] == 2 and interim["comparison"]["groups"] == cmp["groups"]
    again = closed_loop(ws, cfg, log=lambda *_: None)  # every phase resumes: nothing is trained or rolled out again
    assert again["train"]["final_dir"] == out["train"]["final_dir"]
    assert again["base"]["heldout"]["run_id"] == out["base"]["heldout"]["run_id"]
    assert again["trained"]["heldout"]["cost"] == out["trained"]["heldout"]["cost"]
    # ... and no model server was started for the finished evaluations (their reports were found)
    assert again["base"]["heldout"].get("servers") is None and again["trained"]["heldout"].get("servers") is None
    now = progress(ws, cfg)  # the interim report reads the same runs from the files
    assert now["base"]["finished"] and now["base"]["run_id"] == out["base"]["heldout"]["run_id"]
    assert now["trained"]["finished"] and now["trained"]["run_id"] == out["trained"]["heldout"]["run_id"]
    assert now["train"]["global_step"] == out["train"]["global_step"]
    # the scaling curve's "all" point trains on the main run's rows for its steps: the main checkpoint is reused
    curve = scaling_curve(ws, cfg.model_copy(update={"scaling_points": ["all"]}), log=lambda *_: None)
    base_point, all_point = curve["points"]
    assert (base_point["domains"], all_point["domains"]) == (0, 1) and curve["steps"] == out["train"]["global_step"]
    assert all_point["checkpoint"].startswith("the main run's") and all_point["train"]["final_dir"] == out["train"]["final_dir"]
    assert not (ws.root / "closed_loop" / "scaling-1" / "model").exists()  # nothing trained for it
    assert all_point["scenarios"] == 2 and all_point["run_id"] != out["trained"]["heldout"]["run_id"]  # k = 1: its own run
    assert f"Point all (1): the checkpoint of the main run of that time ({all_point['model']})" in \
        (ws.reports_dir / "scaling.md").read_text()
    depth = scaling_curve(ws, cfg.model_copy(update={"scaling_points": ["all"], "scaling_base": False}),
                          log=lambda *_: None)  # a point without the base model's (evaluated or not)
    assert [p["domains"] for p in depth["points"]] == [1] and depth["points"][0]["run_id"] == all_point["run_id"]
    # an evaluation reported before the first call's argument errors were counted: the point counts them
    # from the run's trajectories, the same as the report's own
    rep_file = eval_path(ws, all_point["run_id"])
    rep = json.loads(rep_file.read_text())
    counted = rep["diagnostics"].pop("first_call_arguments")
    text_match = rep["diagnostics"].pop("text_match_first_tool")
    rep_file.write_text(json.dumps(rep))
    older = scaling_curve(ws, cfg.model_copy(update={"scaling_points": ["all"], "scaling_base": False}), log=lambda *_: None)
    assert older["points"][0]["diagnostics"] == {**rep["diagnostics"], "first_call_arguments": counted,
                                                  "text_match_first_tool": text_match}
    # tau2's test split added afterwards, base vs the same checkpoint, the held-out comparison untouched
    tau2 = tau2_comparison(ws, ClosedLoopConfig(tau2_domains=["retail"], tau2_max_scenarios=2), log=lambda *_: None)
    assert tau2["comparison"] == json.loads(json.dumps(cmp)) and tau2["train"]["final_dir"] == out["train"]["final_dir"]
    for side in ("base", "trained"):
        assert tau2[side]["tau2"]["scenarios"] == 2 and tau2[side]["tau2"]["model"] == out[side]["heldout"]["model"]
    assert tau2["tau2_comparison"]["groups"]["overall"]["scenarios"] == 2
    assert tau2["tau2_settings"]["trained_on_tau2"] is False  # the loop ran with tau2 off
    md = (ws.reports_dir / "closed_loop.md").read_text()
    assert "retail: the first 2 test tasks, k = 1, servers with 8192 positions; the trained model never saw" in md
    # a step-based main run (--main-steps) takes a scaling point trained on the same rows for as many steps
    steps = out["train"]["global_step"] + 1  # not the budgeted run's count: the point trains its own checkpoint
    point = scaling_curve(ws, cfg.model_copy(update={"scaling_points": ["all"], "scaling_base": False,
                                                     "scaling_steps": steps}), log=lambda *_: None)["points"][0]
    assert point["checkpoint"] == "own" and point["train"]["global_step"] == steps
    assert not list((ws.root / "closed_loop" / "scaling-1" / "model").glob("checkpoint-*"))  # done: final/ holds it
    # where the curve stands, read from its files: the same runs
    at = cfg.model_copy(update={"scaling_points": ["all"], "scaling_steps": steps})
    base_now, point_now = scaling_progress(ws, at)["points"]
    assert base_now["evaluation"]["finished"] and base_now["evaluation"]["run_id"] == base_point["run_id"]
    assert point_now["label"] == "all (1)" and point_now["training"]["finished"]
    assert point_now["training"]["global_step"] == steps and point_now["evaluation"]["run_id"] == point["run_id"]
    more = scaling_progress(ws, at.model_copy(update={"scaling_steps": steps + 5}))["points"][1]["training"]
    assert more["finished"] is False and more["of"] == steps + 5 and more["resumes_from"] is None  # another key
    assert scaling_progress(ws, at.model_copy(update={"session_length": 0}))["points"][1]["training"] == "not started"
    # other steps in the same point folder: its finished model is shelved, not overwritten, and put back
    # (nothing trained) when the first setting runs again; progress finds either where it is
    logs: list[str] = []
    other = scaling_curve(ws, at.model_copy(update={"scaling_base": False, "scaling_steps": steps + 1}),
                          log=logs.append)["points"][0]
    assert other["train"]["global_step"] == steps + 1 and other["model"] != point["model"]
    shelf = ws.root / "closed_loop" / "scaling-1" / "shelved"
    assert [p.name[:8] for p in shelf.iterdir()] == [point["model"][-8:]] and any("shelved" in line for line in logs)
    assert scaling_progress(ws, at)["points"][1]["training"]["finished"]  # from its shelf
    logs.clear()
    again = scaling_curve(ws, at.model_copy(update={"scaling_base": False}), log=logs.append)["points"][0]
    assert again["run_id"] == point["run_id"] and again["train"] == point["train"]
    assert any("put back" in line for line in logs) and not any("training on" in line for line in logs)
    assert [p.name[:8] for p in shelf.iterdir()] == [other["model"][-8:]]
    assert scaling_progress(ws, at.model_copy(update={"scaling_steps": steps + 1}))["points"][1]["training"]["finished"]
    stepped = closed_loop(ws, cfg.model_copy(update={"main_steps": steps}), log=lambda *_: None)
    assert stepped["train"]["final_dir"] == point["train"]["final_dir"] != out["train"]["final_dir"]
    assert stepped["trained"]["heldout"]["model"] == point["model"]  # the same checkpoint, now at k = 2
    assert f"stopped by max_steps ({steps} steps planned)" in (ws.reports_dir / "closed_loop.md").read_text()
    # equal data: the point's train split cut to one conversation, its own checkpoint (other rows than main's)
    equal = scaling_curve(ws, cfg.model_copy(update={"scaling_points": ["all"], "scaling_base": False, "scaling_steps": 1,
                                                     "scaling_conversations": 1}), log=lambda *_: None)["points"][0]
    assert equal["export"]["capped"]["cap"] == 1 and sum(equal["export"]["conversations_by_origin"]["train"].values()) == 1
    assert equal["checkpoint"] == "own" and (ws.root / "closed_loop" / "scaling-1-c1" / "model" / "result.json").exists()
    assert "equal data: each point's train split cut to 1 conversations" in (ws.reports_dir / "scaling.md").read_text()


def test_progress_reads_a_running_training_log(tmp_path):
    """The training's own log format (TRL's per-step dicts between progress lines), written here."""
    log = tmp_path / "train.log"
    log.write_text("progress: step 1/10\n{'loss': '0.17', 'learning_rate': '1e-06', 'num_tokens': '1.9e+04'}\n"
                   "{'eval_loss': '0.13', 'eval_runtime': '150'}\nprogress: step 2/10 micro-batch 1/4\n"
                   "{'loss': '0.14', 'learning_rate': '9.9e-05', 'num_tokens': '3.6e+04'}\n")
    got = _logged_steps(log)
    assert got == {"steps_logged": 2, "last_loss": "0.14", "tokens_seen": "3.6e+04", "learning_rate": "9.9e-05",
                   "eval_loss": ["0.13"]}
    # a log with two launches, the second resumed from checkpoint-10: its steps come after step 10
    log.write_text("$ python -m training.sft ...\n" + "{'loss': '0.3'}\n" * 12 + "$ python -m training.sft ...\n"
                   "resuming from checkpoint-10 (an interrupted run with the same resume key)\n" + "{'loss': '0.2'}\n" * 3)
    assert _logged_steps(log)["steps_logged"] == 13 and _logged_steps(log)["last_loss"] == "0.2"


def test_a_point_folder_shelves_the_models_of_other_keys(tmp_path):
    """Hand-made model folders (the test is about moving them, not training)."""
    base = tmp_path / "scaling-8"

    def model(key: str, finished: bool) -> None:
        (base / "model" / "checkpoint-10").mkdir(parents=True)
        (base / "model" / "resume.json").write_text(json.dumps({"key": key}))
        if finished:
            (base / "model" / "key.json").write_text(json.dumps({"key": key}))

    swap_model(base, "a", log=lambda *_: None)  # nothing there: nothing moves
    assert not base.exists()
    model("a", finished=True)
    swap_model(base, "a", log=lambda *_: None)
    assert model_key(base / "model") == "a" and keyed_model(base, "a") == base / "model"
    swap_model(base, "b", log=lambda *_: None)  # a is shelved; b starts in an empty model/
    assert not (base / "model").exists() and model_key(base / "shelved" / "a") == "a"
    assert keyed_model(base, "a") == base / "shelved" / "a" and keyed_model(base, "b") == base / "model"
    model("b", finished=False)  # b killed mid-run: its checkpoints are shelved too, to resume later
    swap_model(base, "a", log=lambda *_: None)
    assert model_key(base / "model") == "a" and (base / "model" / "key.json").exists()
    assert model_key(base / "shelved" / "b") == "b" and (base / "shelved" / "b" / "checkpoint-10").exists()
    swap_model(base, "b", log=lambda *_: None)
    assert sorted(p.name for p in (base / "shelved").iterdir()) == ["a"] and model_key(base / "model") == "b"


def test_a_run_stands_for_another_only_on_the_same_rows_and_steps(tmp_path):
    """Files written here in the shapes export_and_train leaves (report hashes, result, key)."""
    ws = Workspace(tmp_path / "ws")
    main, point = ws.root / "closed_loop" / "main", ws.root / "closed_loop" / "scaling-3"
    for run, digest in ((main, "aaaa"), (point, "aaaa")):
        (run / "sft" / "stage1").mkdir(parents=True)
        (run / "sft" / "stage1" / "report.json").write_text(json.dumps({"content_hash": digest}))
    (main / "model").mkdir()
    (main / "model" / "result.json").write_text(json.dumps({"global_step": 10, "final_dir": "m"}))
    (main / "model" / "key.json").write_text(json.dumps({"key": "k1"}))
    assert trained_on_same_data(ws, "main", point, 10) == {"train": {"global_step": 10, "final_dir": "m"}, "key": "k1"}
    assert trained_on_same_data(ws, "main", point, 12) is None  # other steps
    assert trained_on_same_data(ws, "main", point, None) is None
    assert trained_on_same_data(ws, "scaling-9", point, 10) is None  # no such run
    (point / "sft" / "stage1" / "report.json").write_text(json.dumps({"content_hash": "bbbb"}))
    assert trained_on_same_data(ws, "main", point, 10) is None  # other rows
