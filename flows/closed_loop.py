"""Closed loop on CPU: SmolLM2-135M before and after SFT on the factory's data, on the same held-out scenarios,
and the environment-scaling curve.

    closed_loop(ws, ClosedLoopConfig(...)) -> dict      # reports/closed_loop.{json,md}
    scaling_curve(ws, ClosedLoopConfig(...)) -> dict    # reports/scaling.{json,md,png}

Every phase writes its result to the workspace and is skipped when it is there already (rollout
runs resume by their content-hash ids, a training run by its key), so a run of several hours that
is killed resumes where it stopped.

1. workspace: when it has no environments yet, ingest `corpus`, discover, synthesize every domain
   and build its scenarios (rules), plus the tau2 verticals.
2. evaluation set: `eval_scenarios` held-out scenarios from >= `eval_domains` held-out domains
   (tasks.evaluation.eval_set; written once, the same for every model compared).
3. data: gold-replayed demonstrations of every train-split scenario (tasks.rollouts.gold, labelled
   `gold-replay`, verified like any trajectory) plus accepted agent experience from `experience_runs`
   (e.g. `agentscaler collect --samples N`), exported in sessions (tasks.sft.export: a domain's
   prompt once, then several conversations) and kept apart by origin in every count.
4. base: the untrained model, served the way the trained one is (`serve(checkpoint=...)` with the
   dequantized SmolLM2 folder, so both run in the same runtime with the same decoding), k trials
   on the evaluation set, and tau2's airline/retail test splits scored as tau2 scores them.
5. train: TRL SFT of SmolLM2-135M for `budget_minutes` of wall time (training/budget.py), with the
   validation loss on the clock.
6. trained: the same evaluations of the checkpoint; then tasks.evaluation.compare (pass^1..k with
   95% bootstrap intervals, single- and multi-call apart, failures by reason and length).

The scaling curve trains on the first 8, 32, 128 and all train domains (a fixed hash order, so each
set holds the smaller ones) with the same optimizer steps, batch, learning rate and data recipe,
and scores each checkpoint (and the base model, 0 domains) with k = 1 on the same evaluation set.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from agentscaler.artifacts import load_trajectories
from agentscaler.endpoints import LOCAL, runtime_label, serve
from agentscaler.hashing import content_hash
from agentscaler.models import Trajectory
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_text
from tasks.corpus.ingest import ingest
from tasks.discover.config import DiscoverConfig
from tasks.discover.discover import discover
from tasks.environments.plan import tool_reading
from tasks.environments.synthesize import synthesize_all
from tasks.evaluation.compare import compare, curve_differences
from tasks.evaluation.contamination import check_contamination
from tasks.evaluation.eval_set import choose_eval_set, eval_set_path, load_eval_set
from tasks.evaluation.evaluate import eval_path, evaluate, run_diagnostics, score_unwritten
from tasks.evaluation.report import closed_loop_markdown, plot_scaling, plot_training_curve, scaling_markdown
from tasks.evaluation.tau2 import DOMAINS, tau2_domain_dir
from tasks.rollouts.conversation import RolloutConfig, sampling_temperature
from tasks.rollouts.gold import gold_replay
from tasks.rollouts.engine import default_run_id, select_scenarios
from tasks.scenarios.build import build_all, is_tau2
from tasks.sft.export import export_sft
from tasks.sft.train import train_stage
from tasks.verify.verify import verify_run
from training.gguf_convert import convert_smollm2, load_tokenizer
from training.resume import RESUME_FILE
from training.resume import latest as latest_checkpoint
from training.tiny import build_tiny_model

GOLD_RUN = "gold-replay"
LOG_ITEM = re.compile(r"'(\w+)': '([^']*)'")  # a key and its value in a logged dict
RESUMED = re.compile(r"resuming from checkpoint-(\d+) ")  # training.sft's line when it continues a run
SCALING_POINTS = ("8", "32", "128", "all")
TAU2_SETTINGS = {"tau2_k", "tau2_n_ctx", "tau2_domains", "tau2_max_scenarios"}  # how tau2's splits are scored


class ClosedLoopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: list[str] = Field(default_factory=lambda: ["bfcl", "tau2", "nestful"])  # built when the workspace is empty
    per_domain: int = 20  # scenarios per domain when building
    walk_length: int = 4  # longest gold call sequence when building
    # evaluation
    eval_set: str = "heldout"  # reports/eval-set-<name>.json
    eval_scenarios: int = 100
    eval_domains: int = 20
    max_prompt_tokens: int = 3072  # held-out domains whose agent prompt fits (tasks.evaluation.eval_set)
    k: int = 4
    tau2: bool = True
    tau2_k: int = 1
    # tau2's policy and tool schemas alone take ~3.5k tokens with SmolLM2's tokenizer (airline 3,492, retail
    # 3,620): its splits get their own servers with SmolLM2's full trained context
    tau2_n_ctx: int = 8192
    tau2_domains: list[str] = Field(default_factory=lambda: list(DOMAINS))
    tau2_max_scenarios: int | None = None  # per split; None: every test task (airline 20, retail 40)
    max_turns: int = 3  # scripted-user turns after the request
    max_steps: int = 4  # agent tool-call rounds per turn
    max_tokens: int = 256
    # end a trial once verification must fail it (RolloutConfig.stop_when_failed): the same verdicts with
    # fewer requests from a looping model; off by default so runs made without it keep their ids
    stop_when_failed: bool = False
    # the agent's repetition penalty (RolloutConfig.repeat_penalty): 1.0, none; None, the server's default
    # (llama-cpp-python's 1.1), as every evaluation made before the setting existed
    repeat_penalty: float | None = 1.0
    # the llama.cpp servers' context, the same for every model compared (SmolLM2 is trained to 8192
    # positions; the evaluation set keeps prompts <= max_prompt_tokens so conversations fit in 4096)
    n_ctx: int = 4096
    # the server's CPU threads (decode and prompt), the same for every model compared: 1, because two
    # threads spin against each other when the 2 cores are busy (a 3-request trial took 612 s at load 14)
    server_threads: int = 1
    server_replicas: int = 2  # one-thread servers of the model (agentscaler.endpoints.serve): one per core
    # data
    session_length: int = 5120  # tokens per training session (a domain's prompt once, then conversations)
    experience_runs: list[str] = Field(default_factory=list)  # accepted agent experience to train on too
    # training
    base_model: str = "smollm2-135m"
    budget_minutes: float = 90.0
    # the main run's optimizer steps instead of budget_minutes (None: budgeted); a scaling point trained on
    # the same rows for these steps is reused, so the curve's all-domains point becomes the main comparison
    main_steps: int | None = None
    max_length: int = 5120
    learning_rate: float = 1e-4
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.05
    batch_size: int = 1
    grad_accum: int = 4
    bf16: bool = True  # bf16 autocast on the CPU (benchmarks/bench_train.py: the faster setting here)
    freeze_embeddings: bool = False
    gradient_checkpointing: bool = True  # activations of one layer at a time: a 4k-token row fits in a few GB
    train_top_layers: int | None = None  # train only the top N decoder layers (training.sft.train_top_layers)
    eval_every_minutes: float = 15.0
    eval_max_rows: int = 24
    torch_threads: int = 2
    # a step-sized run's checkpoint every N steps (training/resume.py; not in the run's key: it does not
    # change what is trained). 10: about 15 minutes of CPU training a point; each save writes ~1.6 GB
    checkpoint_steps: int = Field(default=10, ge=1)
    engine: str = "llama"  # both models on llama.cpp (GGUF exports), or "hf" for both on transformers
    precision: str = "f16"  # of both GGUF exports (agentscaler.gguf_export)
    seed: int = 0
    # scaling curve
    scaling_points: list[str] = Field(default_factory=lambda: list(SCALING_POINTS))
    scaling_steps: int | None = None  # default: the steps the budgeted main run made
    scaling_k: int = 1
    scaling_base: bool = True  # False: no base point (a depth point beside a curve that has one; same eval set)
    # Equal data: each point trains on this many conversations, drawn evenly over its domains
    # (tasks.sft.export.even_draw), so points differ in domains, not in data; None: all their rows.
    scaling_conversations: int | None = Field(default=None, ge=1)


# --- 1-3. workspace, evaluation set, data ---------------------------------------------------------

def prepare_workspace(ws: Workspace, cfg: ClosedLoopConfig, log: Any = print) -> dict[str, Any]:
    """Build environments and scenarios when the workspace has none; add the tau2 verticals."""
    out: dict[str, Any] = {}
    if not ws.domain_ids() or all(is_tau2(d) for d in ws.domain_ids()):
        log(f"[closed-loop] building a workspace from {cfg.corpus}")
        out["ingest"] = {k: v for k, v in ingest(ws, cfg.corpus).items() if k in ("accepted", "sources")}
        found = discover(ws, cfg=DiscoverConfig(embedding="fast"), draw=False, reading=tool_reading)
        out["discover"] = {k: v for k, v in found.items() if k in ("domains", "modularity")}
        synth = synthesize_all(ws, synth="rules", seed=cfg.seed)
        out["synthesize"] = synth["counts"]
        built = build_all(ws, per_domain=cfg.per_domain, max_length=cfg.walk_length, seed=cfg.seed)
        out["scenarios"] = {k: built.get(k) for k in ("domains", "kept", "failed")}
    if cfg.tau2:
        for name in DOMAINS:
            tau2_domain_dir(ws, name)
    out["domains"] = len(ws.domain_ids())
    return out


def train_domains(ws: Workspace) -> list[str]:
    """Domains with train-split scenarios (tau2 excluded) in a fixed hash order: the scaling curve's
    nested subsets."""
    doms = [d for d in ws.domain_ids() if not is_tau2(d) and select_scenarios(ws, "train", 1, [d])]
    return sorted(doms, key=lambda d: content_hash({"scaling_order": d}, 12))


def base_checkpoint(ws: Workspace, model: str) -> Path:
    """The folder the base model is served from and training starts from (the same weights):
    SmolLM2-135M dequantized from the shipped GGUF, or (tests) the tiny model saved once."""
    if model == "smollm2-135m":
        return convert_smollm2()
    if model != "tiny":
        return Path(model)
    out = ws.root / "closed_loop" / "base-tiny"
    if not (out / "config.json").exists():
        tok = load_tokenizer()
        build_tiny_model(tok).save_pretrained(str(out))
        tok.save_pretrained(str(out))
    return out


def gold_replay_run(ws: Workspace, domains: list[str], run_id: str = GOLD_RUN) -> dict[str, Any]:
    """Gold-replayed trajectories of the train-split scenarios of `domains` (tasks.rollouts.gold), verified."""
    out = gold_replay(ws, domains, run_id)
    verify = verify_run(ws, run_id)
    return {**out, "funnel": verify.get("funnel"), "passed": verify.get("passed", 0),
            "failed_reasons": sorted(r for r, n in (verify.get("reasons") or {}).items() if n)}


def ensure_gold(ws: Workspace) -> dict[str, Any]:
    """The gold replays of every train domain and tau2's train split (once: a second call reads them)."""
    report = ws.rollout_dir(GOLD_RUN) / "verify.json"
    if report.exists():
        v = json.loads(report.read_text())
        return {"run_id": GOLD_RUN, "passed": v.get("passed"), "funnel": v.get("funnel"), "skipped": True}
    doms = train_domains(ws) + [d for d in ws.domain_ids() if is_tau2(d)]
    return gold_replay_run(ws, doms)


def ensure_eval_set(ws: Workspace, cfg: ClosedLoopConfig) -> dict[str, Any]:
    if eval_set_path(ws, cfg.eval_set).exists():
        return load_eval_set(ws, cfg.eval_set)
    return choose_eval_set(ws, scenarios=cfg.eval_scenarios, min_domains=cfg.eval_domains,
                           max_prompt_tokens=cfg.max_prompt_tokens, name=cfg.eval_set)


# --- 4/6. evaluation ----------------------------------------------------------------------------

def rollout_config(cfg: ClosedLoopConfig, k: int) -> RolloutConfig:
    """The evaluation's rollout settings, as tasks.evaluation.evaluate runs them (the user's goal check
    off), so finished_evaluation finds the run evaluate() wrote (its id hashes these settings)."""
    temp = sampling_temperature(k)
    return RolloutConfig(max_turns=cfg.max_turns, max_steps=cfg.max_steps, max_tokens=cfg.max_tokens,
                         temperature=temp, user_temperature=temp, goal_check=False, stop_when_failed=cfg.stop_when_failed,
                         repeat_penalty=cfg.repeat_penalty)


def evaluate_model(ws: Workspace, cfg: ClosedLoopConfig, checkpoint: Path, name: str, k: int,
                   tau2: bool = False, log: Any = print) -> dict[str, Any]:
    """Serve `checkpoint` (the base model's folder or a trained one) and score it on the evaluation
    set with k trials; with tau2, also on tau2's test splits (cfg.tau2_k trials)."""
    ids = load_eval_set(ws, cfg.eval_set)["scenario_ids"]
    done = finished_evaluation(ws, name, rollout_config(cfg, k), k, ids)
    out: dict[str, Any] = {"heldout": done} if done is not None else {}  # a resumed loop: no server to start
    if done is None:
        t0 = time.perf_counter()
        with serve_model(ws, cfg, checkpoint, name, cfg.n_ctx) as urls:
            out["heldout"] = evaluate(ws, urls, model=name, k=k, split="heldout", scenario_ids=ids,
                                      cfg=rollout_config(cfg, k), concurrency=1, timeout=600)
            out["heldout"]["servers"] = len(urls)
        log(f"[closed-loop] {name}: held-out pass^k {_overall(out['heldout'])} ({time.perf_counter() - t0:.0f} s)")
    if tau2:
        out["tau2"] = evaluate_tau2(ws, cfg, checkpoint, name, log)
    return out


def evaluate_tau2(ws: Workspace, cfg: ClosedLoopConfig, checkpoint: Path, name: str, log: Any = print) -> dict[str, Any]:
    """tau2's test splits (cfg.tau2_domains, cfg.tau2_k trials), scored as tau2 scores them, on servers with
    cfg.tau2_n_ctx positions (tau2's prefix alone is ~3.5k tokens)."""
    t0 = time.perf_counter()
    with serve_model(ws, cfg, checkpoint, name, cfg.tau2_n_ctx, suffix="-tau2") as urls:
        rep = evaluate(ws, urls, model=name, k=cfg.tau2_k, split="heldout", tau2=list(cfg.tau2_domains),
                       max_scenarios=cfg.tau2_max_scenarios, cfg=rollout_config(cfg, cfg.tau2_k), concurrency=1,
                       timeout=600)
        rep["servers"] = len(urls)
    log(f"[closed-loop] {name}: tau2 pass^k {_overall(rep)} ({time.perf_counter() - t0:.0f} s)")
    return rep


def serve_model(ws: Workspace, cfg: ClosedLoopConfig, checkpoint: Path, name: str, n_ctx: int, suffix: str = "") -> Any:
    """`serve` the way every compared model is served: the same runtime, threads, replicas and context."""
    options = {"max_new_tokens": cfg.max_tokens} if cfg.engine == "hf" else {"n_ctx": n_ctx}
    return serve(LOCAL, checkpoint=checkpoint, engine=cfg.engine, precision=cfg.precision, model_alias=name,
                 threads=cfg.server_threads, replicas=cfg.server_replicas,
                 log_path=ws.reports_dir / f"server-{name}{suffix}.log", **options)


def finished_evaluation(ws: Workspace, model: str, rcfg: RolloutConfig, k: int, ids: list[str]) -> dict[str, Any] | None:
    """The evaluation report of this model, settings and scenarios when every trial of it is written."""
    path = eval_path(ws, default_run_id(model, rcfg, k, ids))
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return report if report.get("trajectories") == len(ids) * k else None


def _overall(report: dict[str, Any]) -> dict[str, Any]:
    return ((report.get("pass^k") or {}).get("overall") or {}).get("pass^k") or {}


def trajectory_stats(ws: Workspace, run_id: str) -> dict[str, Any]:
    """Per run, from the trajectories (so it survives a resumed run): conversation and agent-LLM time,
    agent requests and prompt tokens (the per-request cost), format errors, executed calls."""
    trajs = load_trajectories(ws, run_id)

    def n(t: Trajectory, key: str) -> int:
        return int(t.tokens.get(key, 0))

    requests = sum(n(t, "n_agent_turns") for t in trajs)
    llm_s = sum(t.timings.get("agent_llm_s", 0.0) for t in trajs)
    return {"conversations": len(trajs), "conversations_s": round(sum(t.timings.get("total_s", 0.0) for t in trajs), 1),
            "agent_llm_s": round(llm_s, 1), "agent_requests": requests,
            "seconds_per_request": round(llm_s / requests, 2) if requests else None,
            "agent_prompt_tokens": sum(n(t, "agent_prompt") for t in trajs),
            "format_errors": sum(n(t, "n_format_errors") for t in trajs),
            "tool_calls_executed": sum(n(t, "n_tool_calls") for t in trajs)}


# --- 5. training --------------------------------------------------------------------------------

def stage_config(cfg: ClosedLoopConfig, base: Path, dataset_dir: Path, output_dir: Path,
                 max_steps: int | None) -> dict[str, Any]:
    """The stage-1 YAML of a closed-loop run (budgeted when max_steps is None), starting from `base`."""
    return {"stage": 1, "model": str(base), "max_length": cfg.max_length, "learning_rate": cfg.learning_rate,
            "lr_scheduler_type": cfg.lr_scheduler_type, "warmup_ratio": cfg.warmup_ratio,
            "per_device_train_batch_size": cfg.batch_size, "gradient_accumulation_steps": cfg.grad_accum,
            "max_steps": max_steps if max_steps is not None else -1, "num_train_epochs": 100,
            "budget_minutes": None if max_steps is not None else cfg.budget_minutes,
            "eval_every_minutes": cfg.eval_every_minutes, "eval_max_rows": cfg.eval_max_rows,
            "logging_steps": 1, "save_steps": 10**6, "save_total_limit": 1, "seed": cfg.seed,
            "torch_threads": cfg.torch_threads, "bf16": cfg.bf16, "freeze_embeddings": cfg.freeze_embeddings,
            "gradient_checkpointing": cfg.gradient_checkpointing, "train_top_layers": cfg.train_top_layers,
            "dataset_dir": str(dataset_dir / "stage1" / "hf"), "output_dir": str(output_dir)}


def export_and_train(ws: Workspace, cfg: ClosedLoopConfig, name: str, domains: list[str] | None,
                     max_steps: int | None, log: Any = print, reuse: tuple[str, ...] = (),
                     max_train_conversations: int | None = None) -> dict[str, Any]:
    """Export the data of `domains` (None: all) in sessions and train one checkpoint; skipped when a run
    with the same data and config finished before, or when one of the runs named in `reuse` (closed_loop/
    <name>) trained on the same rows for `max_steps` steps. Returns {export, train, key} (+ reused_from).
    max_train_conversations: the train split cut to that many conversations, drawn evenly over the domains."""
    base = ws.root / "closed_loop" / name
    runs = [GOLD_RUN, *cfg.experience_runs]
    check_contamination(ws)  # cached by content; the export refuses scenarios never screened
    export = export_sft(ws, stages=(1,), run_ids=runs, max_length=cfg.max_length, target_domains=[],
                        domains=domains, session_length=cfg.session_length, out_dir=base / "sft",
                        max_train_conversations=max_train_conversations)
    if not export["stages"]["stage1"]["rows"]["train"]:
        raise ValueError(f"{name}: no training rows (export report {base / 'sft' / 'report.json'}: dropped "
                         f"{export.get('dropped')})")
    for other in reuse:
        done = trained_on_same_data(ws, other, base, max_steps)
        if done is not None:
            log(f"[closed-loop] {name}: {other} trained on the same rows for {max_steps} steps, reusing its checkpoint")
            return {"export": _export_brief(export), "train": done["train"], "key": done["key"], "reused_from": other}
    conf, key = training_key(ws, cfg, base, max_steps)
    swap_model(base, key, log)
    result_path = base / "model" / "result.json"
    key_path = base / "model" / "key.json"
    if result_path.exists() and key_path.exists() and json.loads(key_path.read_text()).get("key") == key:
        log(f"[closed-loop] {name}: trained before (key {key[:8]}), reusing {base / 'model' / 'final'}")
        return {"export": _export_brief(export), "train": json.loads(result_path.read_text()), "key": key}
    conf_path = base / "stage1.yaml"
    conf_path.parent.mkdir(parents=True, exist_ok=True)
    conf_path.write_text(yaml.safe_dump(conf))
    log(f"[closed-loop] {name}: training on {_export_brief(export)['rows']} "
        f"({'budget ' + str(cfg.budget_minutes) + ' min' if max_steps is None else str(max_steps) + ' steps'})")
    # step-sized runs save a checkpoint every cfg.checkpoint_steps and one killed before the end (a
    # session's end) continues from it when the run is started again; budgeted runs start over
    result = train_stage(ws, 1, config=conf_path, save_steps=cfg.checkpoint_steps if max_steps is not None else None,
                         resume_key=key if max_steps is not None else None)
    atomic_write_json(key_path, {"key": key})
    return {"export": _export_brief(export), "train": result, "key": key}


SHELF = "shelved"  # closed_loop/<name>/shelved/<key>/: the models this folder trained under other keys


def model_key(model: Path) -> str | None:
    """The key of what a run folder's model/ holds: the keyed run last started in it (resume.json: in
    progress, or finished), else the finished run's (key.json: a budgeted one); None when neither."""
    for name in (RESUME_FILE, "key.json"):
        try:
            return str(json.loads((model / name).read_text())["key"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def keyed_model(base: Path, key: str) -> Path:
    """Where a run folder keeps the model of `key`: model/, or its shelf when another took its place."""
    shelved = base / SHELF / key
    return shelved if model_key(base / "model") != key and shelved.is_dir() else base / "model"


def swap_model(base: Path, key: str, log: Any = print) -> None:
    """Before a run folder trains under `key`: what model/ holds of another key (a finished model, or
    checkpoints a restart resumes from) is shelved under that key instead of being overwritten or
    removed, and a model shelved under `key` is put back. A curve point's folder is named by its
    domains (and equal-data cut) only, so curves of other settings (steps, sessions, experience)
    share it, and each of its models costs an hour or more of CPU training."""
    model = base / "model"
    held = model_key(model) if model.exists() else None
    back = base / SHELF / key
    if held == key or (held is None and not back.is_dir()):
        return  # nothing to shelve (an unkeyed folder: an interrupted budgeted run, which starts over)
    if held is not None:
        dest = base / SHELF / held
        shutil.rmtree(dest, ignore_errors=True)  # an older shelf of the same key: superseded
        dest.parent.mkdir(parents=True, exist_ok=True)
        model.rename(dest)
        log(f"[closed-loop] {base.name}: the model of key {held[:8]} shelved in {dest}")
    if back.is_dir():
        shutil.rmtree(model, ignore_errors=True)  # left only when unkeyed: nothing to resume in it
        back.rename(model)
        log(f"[closed-loop] {base.name}: the model of key {key[:8]} put back from {back}")


def training_key(ws: Workspace, cfg: ClosedLoopConfig, base: Path, max_steps: int | None) -> tuple[dict[str, Any], str]:
    """The stage config of a run folder (closed_loop/<name>) and its key: the exported rows' content
    hash and that config (a checkpoint is reused, or resumed, only under the same key)."""
    conf = stage_config(cfg, base_checkpoint(ws, cfg.base_model), base / "sft", base / "model", max_steps)
    data = json.loads((base / "sft" / "stage1" / "report.json").read_text())["content_hash"]
    return conf, content_hash({"data": data, "config": conf})


def trained_on_same_data(ws: Workspace, other: str, point: Path, steps: int | None) -> dict[str, Any] | None:
    """Run `other` (closed_loop/<other>) standing for `point`: when it finished after `steps` optimizer
    steps on the very rows `point` exported (same content hash), training again would cost 20-45
    CPU-minutes for the same model (the budgeted main run differs only in that its warmup and cosine
    learning rate ran on the clock instead of on steps). Returns {train, key}, or None."""
    run = ws.root / "closed_loop" / other
    paths = (run / "sft" / "stage1" / "report.json", point / "sft" / "stage1" / "report.json",
             run / "model" / "result.json", run / "model" / "key.json")
    if steps is None or not all(p.exists() for p in paths):
        return None
    data_run, data_point, result, key = (json.loads(p.read_text()) for p in paths)
    if data_run["content_hash"] != data_point["content_hash"] or result.get("global_step") != steps:
        return None
    return {"train": result, "key": key["key"]}


def _export_brief(export: dict[str, Any]) -> dict[str, Any]:
    st = export["stages"]["stage1"]
    return {"rows": st["rows"], "rows_by_origin": st.get("rows_by_origin"), "tokens": st["tokens"],
            "conversations_by_origin": export.get("conversations_by_origin", {}).get("stage1"),
            "dropped": export.get("dropped"), "domains": len(export["domains"]) if export.get("domains") else "all",
            "capped": export.get("capped", {}).get("stage1"),
            "session_length": export.get("session_length")}


def _train_brief(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("global_step", "stopped_by", "budget_minutes", "train_seconds", "tokens_seen", "tokens_per_second",
            "first_loss", "last_loss", "final_learning_rate", "epochs", "dataset", "final_dir", "curve", "eval")
    return {k: r.get(k) for k in keys}


# --- the loop -----------------------------------------------------------------------------------

def closed_loop(ws: Workspace, cfg: ClosedLoopConfig | None = None, log: Any = print) -> dict[str, Any]:
    """Phases 1-6; writes reports/closed_loop.{json,md} (+ the training curve PNG); returns the JSON."""
    cfg = cfg or ClosedLoopConfig()
    ws.root.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    out: dict[str, Any] = {"config": cfg.model_dump(), "phases_s": phases}

    def phase(name: str, t0: float) -> None:
        phases[name] = round(time.perf_counter() - t0, 1)
        log(f"[closed-loop] {name}: {phases[name]} s")

    t = time.perf_counter()
    out["workspace"] = prepare_workspace(ws, cfg, log)
    out["eval_set"] = {k: v for k, v in ensure_eval_set(ws, cfg).items() if k != "scenario_ids"}
    out["gold_replay"] = ensure_gold(ws)
    phase("prepare", t)

    base_ckpt = base_checkpoint(ws, cfg.base_model)
    t = time.perf_counter()
    out["runtime"] = runtime_label(base_ckpt, cfg.engine, cfg.precision)  # both models are served this way
    base = evaluate_model(ws, cfg, base_ckpt, f"{cfg.base_model}-base", cfg.k, tau2=cfg.tau2, log=log)
    phase("base_eval", t)

    t = time.perf_counter()
    # a step-based main run reuses a scaling point's checkpoint trained on the same rows for the same steps
    points = tuple(sorted(p.name for p in (ws.root / "closed_loop").glob("scaling-*"))) if cfg.main_steps else ()
    trained_run = export_and_train(ws, cfg, "main", None, cfg.main_steps, log, reuse=points)
    out["export"], out["train"] = trained_run["export"], _train_brief(trained_run["train"])
    phase("train", t)

    t = time.perf_counter()
    name = f"{cfg.base_model}-sft-{trained_run['key'][:8]}"
    trained = evaluate_model(ws, cfg, Path(trained_run["train"]["final_dir"]), name, cfg.k, tau2=cfg.tau2, log=log)
    phase("trained_eval", t)

    out["base"] = {suite: _eval_brief(ws, rep) for suite, rep in base.items()}
    out["trained"] = {suite: _eval_brief(ws, rep) for suite, rep in trained.items()}
    out["comparison"] = compare(base["heldout"], trained["heldout"])
    if cfg.tau2:
        out["tau2_comparison"] = compare(base["tau2"], trained["tau2"])
        out["tau2_settings"] = tau2_settings(ws, cfg)
    out["figures"] = {"training_curve": str(plot_training_curve(out["train"]["curve"],
                                                                ws.reports_dir / "closed_loop_training.png"))}
    atomic_write_json(ws.reports_dir / "closed_loop.json", out)
    atomic_write_text(ws.reports_dir / "closed_loop.md", closed_loop_markdown(out))
    return out


def tau2_comparison(ws: Workspace, cfg: ClosedLoopConfig | None = None, log: Any = print) -> dict[str, Any]:
    """tau2's test splits, base vs the main run's checkpoint, added to a finished loop's
    reports/closed_loop.{json,md}: for a loop run with tau2 off, whose trained model never saw a tau2
    domain (tau2 then is held out entirely, as the paper evaluates on it). The held-out comparison is
    not touched; `cfg` gives only the tau2 settings (trials, context, splits)."""
    cfg = cfg or ClosedLoopConfig()
    path = ws.reports_dir / "closed_loop.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no finished closed loop to add tau2's splits to")
    out = json.loads(path.read_text())
    run_cfg = ClosedLoopConfig(**{**out["config"], **cfg.model_dump(include=TAU2_SETTINGS)})
    models = {"base": (base_checkpoint(ws, run_cfg.base_model), out["base"]["heldout"]["model"]),
              "trained": (Path(out["train"]["final_dir"]), out["trained"]["heldout"]["model"])}
    reports = {side: evaluate_tau2(ws, run_cfg, ckpt, name, log) for side, (ckpt, name) in models.items()}
    for side, rep in reports.items():
        out[side]["tau2"] = _eval_brief(ws, rep)
    out["tau2_comparison"] = compare(reports["base"], reports["trained"], run_cfg.tau2_k)
    out["tau2_settings"] = tau2_settings(ws, run_cfg)
    atomic_write_json(path, out)
    atomic_write_text(ws.reports_dir / "closed_loop.md", closed_loop_markdown(out))
    return out


def tau2_settings(ws: Workspace, cfg: ClosedLoopConfig) -> dict[str, Any]:
    """How tau2 was scored, and whether the training data could hold tau2 (gold replays of its train split)."""
    gold_domains = {t.domain for t in load_trajectories(ws, GOLD_RUN)}
    return {**cfg.model_dump(include=TAU2_SETTINGS),
            "trained_on_tau2": any(is_tau2(d) for d in gold_domains)}


def _eval_brief(ws: Workspace, report: dict[str, Any]) -> dict[str, Any]:
    keys = ("run_id", "model", "k", "scenarios", "verified", "passed", "accuracy", "attribution", "reasons",
            "diagnostics", "wall_s", "tau2_agreement", "servers")
    return {**{k: report.get(k) for k in keys}, "pass^k": _overall(report),
            "intervals": {g: report["intervals"][g]["pass^k"] for g in ("overall", "single_call", "multi_call")},
            "cost": trajectory_stats(ws, report["run_id"])}


def progress(ws: Workspace, cfg: ClosedLoopConfig | None = None) -> dict[str, Any]:
    """Where a long closed loop stands, read from its workspace only (nothing runs, nothing is
    written there): the evaluation set, each model's held-out evaluation (its report when every trial
    is written, else the trials so far) and the training (its result, else the logged steps so far).
    For a run that spans sessions: interim figures from files, not from memory."""
    cfg = cfg or ClosedLoopConfig()
    ev = load_eval_set(ws, cfg.eval_set)
    ids = ev["scenario_ids"]
    out: dict[str, Any] = {"eval_set": {k: v for k, v in ev.items() if k in ("scenarios", "single_call", "multi_call",
                                                                           "read_only", "by_length")},
                           "eval_domains": len(ev["domains"]), "k": cfg.k}
    out["base"] = _evaluation_progress(ws, f"{cfg.base_model}-base", cfg, ids)
    model_dir = ws.root / "closed_loop" / "main" / "model"
    trained = trained_model(ws, cfg)
    if (model_dir / "result.json").exists() and trained is not None:
        out["train"] = {k: v for k, v in _train_brief(json.loads((model_dir / "result.json").read_text())).items()
                        if k != "curve"}
        out["trained"] = _evaluation_progress(ws, trained, cfg, ids)
    elif (model_dir / "train.log").exists():
        out["train"] = {"finished": False, **_logged_steps(model_dir / "train.log")}
    return out


def _evaluation_progress(ws: Workspace, model: str, cfg: ClosedLoopConfig, ids: list[str],
                         k: int | None = None) -> dict[str, Any]:
    k = k or cfg.k
    rcfg = rollout_config(cfg, k)
    run_id = default_run_id(model, rcfg, k, ids)
    done = finished_evaluation(ws, model, rcfg, k, ids)
    if done is not None:
        return {"model": model, "run_id": run_id, "finished": True, **{k: v for k, v in _eval_brief(ws, done).items()
                                                                      if k not in ("run_id", "model")}}
    path = ws.rollout_dir(run_id) / "trajectories.jsonl"
    trials = sum(1 for _ in path.open()) if path.exists() else 0
    return {"model": model, "run_id": run_id, "finished": False, "trials": trials, "of": len(ids) * k}


def trained_model(ws: Workspace, cfg: ClosedLoopConfig) -> str | None:
    """The main run's trained model name, as closed_loop serves it (None before its training key exists)."""
    key_path = ws.root / "closed_loop" / "main" / "model" / "key.json"
    if not key_path.exists():
        return None
    return f"{cfg.base_model}-sft-{json.loads(key_path.read_text())['key'][:8]}"


def interim_comparison(ws: Workspace, cfg: ClosedLoopConfig | None = None) -> dict[str, Any] | None:
    """Base vs trained on the held-out scenarios whose k trials both models have written: the paired
    comparison of a trained evaluation still running (None until one scenario is complete). The
    trials are verified in memory, as the finished evaluation verifies them (nothing is written).
    Interim: the scenarios done so far are the first domains of the evaluation order, not a sample."""
    cfg = cfg or ClosedLoopConfig()
    trained = trained_model(ws, cfg)
    if trained is None:
        return None
    ids = load_eval_set(ws, cfg.eval_set)["scenario_ids"]
    rcfg = rollout_config(cfg, cfg.k)
    models = {"base": f"{cfg.base_model}-base", "trained": trained}
    runs = {side: default_run_id(m, rcfg, cfg.k, ids) for side, m in models.items()}
    trajs = {side: load_trajectories(ws, run_id) for side, run_id in runs.items()}

    def complete(rows: list[Trajectory]) -> set[str]:
        trials: dict[str, set[int]] = {}
        for t in rows:
            trials.setdefault(t.scenario_id, set()).add(t.trial)
        return {sid for sid, got in trials.items() if len(got) >= cfg.k}

    done = complete(trajs["base"]) & complete(trajs["trained"]) & set(ids)
    if not done:
        return None
    reports = {}
    for side, model in models.items():
        kept = {}
        for t in trajs[side]:
            if t.scenario_id in done:
                kept.setdefault((t.scenario_id, t.trial), t)  # one trial each, as the rollout writes them
        reports[side] = {"model": model, "run_id": runs[side], **score_unwritten(ws, list(kept.values()), cfg.k)}
    return {"scenarios": len(done), "of": len(ids), "trials_each": cfg.k,
            "comparison": compare(reports["base"], reports["trained"], cfg.k)}


def _logged_steps(log: Path) -> dict[str, Any]:
    """The optimizer steps a running training has logged (TRL's per-step dicts in its log: one
    line each, string values, e.g. {'loss': '0.1449', 'learning_rate': '9.969e-05', ...})."""
    lines = log.read_text(errors="replace").splitlines()
    # the latest launch only (tasks/sft/train.py writes "$ <command>" before each); a launch that
    # resumed from checkpoint-N logged the steps after N
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    lines = lines[starts[-1]:] if starts else lines
    resumed = next((int(m[1]) for line in lines if (m := RESUMED.match(line))), 0)
    steps = [dict(LOG_ITEM.findall(line)) for line in lines if line.startswith("{'loss'")]
    evals = [dict(LOG_ITEM.findall(line)) for line in lines if line.startswith("{'eval_loss'")]
    last = steps[-1] if steps else {}
    return {"steps_logged": resumed + len(steps), "last_loss": last.get("loss"), "tokens_seen": last.get("num_tokens"),
            "learning_rate": last.get("learning_rate"), "eval_loss": [e.get("eval_loss") for e in evals]}


# --- the environment-scaling curve ---------------------------------------------------------------

def point_name(cfg: ClosedLoopConfig, n: int) -> str:
    """A curve point's folder under closed_loop/ (train domains, and the equal-data cut)."""
    return f"scaling-{n}" + (f"-c{cfg.scaling_conversations}" if cfg.scaling_conversations else "")


def scaling_progress(ws: Workspace, cfg: ClosedLoopConfig | None = None) -> dict[str, Any]:
    """Where a scaling curve stands, read from its workspace only (nothing runs, nothing is written):
    per point, its training (finished, or the steps logged so far and the checkpoint a restart
    resumes from) and its held-out evaluation (pass^1 when finished, else the trials written). A
    point whose folder holds a run of other settings (another key or session length) is "not started";
    its export is read as it stands, not made again (other rows, e.g. other experience runs, would
    get their own key when the curve runs)."""
    cfg = cfg or ClosedLoopConfig()
    order = train_domains(ws)
    ids = load_eval_set(ws, cfg.eval_set)["scenario_ids"]
    rows = min(cfg.session_length, cfg.max_length) if cfg.session_length else None  # as the export records it
    points: list[dict[str, Any]] = []
    if cfg.scaling_base:
        points.append({"label": "0 (base)", "evaluation": _evaluation_progress(
            ws, f"{cfg.base_model}-base", cfg, ids, cfg.scaling_k)})
    for label in cfg.scaling_points:
        n = len(order) if label == "all" else int(label)
        base = ws.root / "closed_loop" / point_name(cfg, n)
        point: dict[str, Any] = {"label": label if label != "all" else f"all ({n})", "domains": n, "folder": str(base),
                                 "training": "not started"}
        points.append(point)
        export = base / "sft" / "report.json"
        if n > len(order) or cfg.scaling_steps is None or not export.exists() or \
                json.loads(export.read_text()).get("session_length") != rows:
            continue
        _, key = training_key(ws, cfg, base, cfg.scaling_steps)
        model_dir = keyed_model(base, key)
        done = (model_dir / "result.json").exists() and (model_dir / "key.json").exists() and \
            json.loads((model_dir / "key.json").read_text()).get("key") == key
        if done:
            result = json.loads((model_dir / "result.json").read_text())
            point["training"] = {"finished": True, **{k: result.get(k) for k in ("global_step", "train_seconds",
                                                                                 "last_loss", "epochs")}}
            point["evaluation"] = _evaluation_progress(ws, f"{cfg.base_model}-sft-{key[:8]}", cfg, ids, cfg.scaling_k)
        elif (model_dir / "train.log").exists():
            resumable = latest_checkpoint(model_dir, key)
            point["training"] = {"finished": False, "of": cfg.scaling_steps, **_logged_steps(model_dir / "train.log"),
                                 "resumes_from": resumable.name if resumable is not None else None}
    return {"steps": cfg.scaling_steps, "k": cfg.scaling_k, "scenarios": len(ids), "repeat_penalty": cfg.repeat_penalty,
            "points": points}


def scaling_curve(ws: Workspace, cfg: ClosedLoopConfig | None = None, log: Any = print) -> dict[str, Any]:
    """Train on nested sets of train domains with the same steps and recipe; held-out pass^1 of each
    (and of the base model, 0 domains) on the same evaluation set. Writes reports/scaling.{json,md,png}."""
    cfg = cfg or ClosedLoopConfig()
    prepare_workspace(ws, cfg, log)
    ensure_eval_set(ws, cfg)
    ensure_gold(ws)
    order = train_domains(ws)
    steps = cfg.scaling_steps
    if steps is None:
        main = ws.root / "closed_loop" / "main" / "model" / "result.json"
        if not main.exists():
            raise FileNotFoundError(f"no scaling_steps given and no budgeted main run at {main}: run closed_loop first")
        steps = int(json.loads(main.read_text())["global_step"])
    points: list[dict[str, Any]] = []
    if cfg.scaling_base:
        base = evaluate_model(ws, cfg, base_checkpoint(ws, cfg.base_model), f"{cfg.base_model}-base", cfg.scaling_k,
                              log=log)["heldout"]
        points.append({"domains": 0, "label": "0 (base)", **_point(ws, base)})
    for label in cfg.scaling_points:
        n = len(order) if label == "all" else int(label)
        if n > len(order):
            log(f"[closed-loop] scaling point {label}: only {len(order)} train domains, skipped")
            continue
        subset = order[:n]
        equal = cfg.scaling_conversations
        run = export_and_train(ws, cfg, point_name(cfg, n), subset, steps, log,
                               reuse=("main",) if n == len(order) else (), max_train_conversations=equal)
        got = sum((run["export"].get("conversations_by_origin") or {}).get("train", {}).values())
        if equal and got < equal:
            log(f"[closed-loop] scaling point {label}: {got} train conversations, fewer than the {equal} asked "
                "(its domains hold no more): this point has less data than the others")
        name = f"{cfg.base_model}-sft-{run['key'][:8]}"
        rep = evaluate_model(ws, cfg, Path(run["train"]["final_dir"]), name, cfg.scaling_k, log=log)["heldout"]
        points.append({"domains": n, "label": label if label != "all" else f"all ({n})",
                       "checkpoint": _reused_label(run),
                       "export": run["export"], "train": {k: v for k, v in _train_brief(run["train"]).items()
                                                          if k != "curve"}, **_point(ws, rep)})
        write_scaling(ws, steps, points, cfg)  # after each point: a run killed later leaves a readable report
    return write_scaling(ws, steps, points, cfg)


def write_scaling(ws: Workspace, steps: int, points: list[dict[str, Any]], cfg: ClosedLoopConfig) -> dict[str, Any]:
    """reports/scaling.{json,md,png} from the points so far (sorted by domains: they may be asked in any order)."""
    points.sort(key=lambda p: p["domains"])
    out = {"steps": steps, "points": points, "config": cfg.model_dump(), "differences": curve_differences(points),
           "figure": str(plot_scaling(points, ws.reports_dir / "scaling.png"))}
    atomic_write_json(ws.reports_dir / "scaling.json", out)
    atomic_write_text(ws.reports_dir / "scaling.md", scaling_markdown(out))
    return out


def _reused_label(run: dict[str, Any]) -> str:
    """Whose checkpoint a scaling point is: its own, or the main run's (step-based, or on the clock)."""
    if not run.get("reused_from"):
        return "own"
    return "the main run's" + (" (learning rate on the clock)" if run["train"].get("stopped_by") == "budget" else "")


def _point(ws: Workspace, rep: dict[str, Any]) -> dict[str, Any]:
    iv = rep["intervals"]
    diag = rep.get("diagnostics") or {}
    if not {"first_call_arguments", "text_match_first_tool"} <= diag.keys():  # reported before these counts: recount
        diag = run_diagnostics(ws, rep["run_id"])
    return {"run_id": rep["run_id"], "model": rep["model"], "scenarios": rep["scenarios"],
            "pass^1": iv["overall"]["pass^k"]["1"], "single_call": iv["single_call"]["pass^k"]["1"],
            "multi_call": iv["multi_call"]["pass^k"]["1"], "diagnostics": diag,
            "reasons": rep.get("reasons"), "cost": trajectory_stats(ws, rep["run_id"]),
            # per scenario [trials, passed]: the curve's paired differences (compare.curve_differences)
            "scenario_counts": (rep.get("scenario_counts") or {}).get("overall")}
