"""Closed loop on CPU: base model pass^k on held-out scenarios -> stage-1 SFT -> the same evaluation again.

    closed_loop(ws, ClosedLoopConfig(...)) -> dict   (also writes <ws>/reports/closed_loop.{md,json})

Phases, each timed:
1. build: a small workspace from a corpus (default: the real BFCL corpus): ingest, discover, then
   rule-based environments and scenarios for a few *small* domains (short tool lists keep prompts
   short on CPU), `train_domains` from the train split and `heldout_domains` from the held-out
   split (the split is tasks.scenarios.build.domain_split's, a hash of the domain id; nothing is moved).
2. baseline: tasks.evaluation.evaluate of SmolLM2-135M (the local llama.cpp server, GGUF) on
   `heldout_scenarios` held-out scenarios, k trials each.
3. data: (a) optionally the base model's own rollouts on train-split scenarios, kept only if
   verified; (b) **gold-replayed** trajectories (tasks.rollouts.gold), labelled `agent_model="gold-replay"`:
   for each train-split scenario, the user's intent, one assistant turn per gold call with the
   gold arguments, the real tool output from the sandboxed environment, and a final assistant
   summary quoting the last result; verified by tasks.verify like any other trajectory. They are
   demonstrations made from the scenario generator's ground truth, not model experience.
   Held-out domains never contribute a row (export reads only these runs).
4. train: tasks.sft.export (stage 1) + tasks.sft.train (TRL SFT, assistant-only loss) of
   SmolLM2-135M converted from the same GGUF, a few optimizer steps.
5. trained: the same evaluation (same scenarios, k, rollout config) of the checkpoint.

Both evaluations run the same way (agentscaler.endpoints.serve with a checkpoint): the base model
from the HF conversion training starts from (training/gguf_convert.py), the trained one from its
checkpoint, each exported to GGUF at `precision` and served by the same llama.cpp server with the
same decoding (agentscaler.decoding); `engine="hf"` runs both on transformers instead.
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from agentscaler.artifacts import load_scenarios, load_tools, load_trajectories
from agentscaler.catalog import Catalog
from agentscaler.endpoints import LOCAL, runtime_label, serve
from agentscaler.models import Trajectory
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_text
from tasks.corpus.ingest import ingest
from tasks.discover.config import DiscoverConfig
from tasks.discover.discover import discover
from tasks.environments.synthesize import load_domain_records, synthesize_domain
from tasks.evaluation.evaluate import evaluate
from tasks.rollouts.conversation import RolloutConfig
from tasks.rollouts.engine import run_rollouts
from tasks.rollouts.gold import gold_replay
from tasks.scenarios.build import build_scenarios, domain_split
from tasks.sft.export import export_sft
from tasks.sft.train import train_stage
from tasks.verify.verify import verify_run
from training.gguf_convert import convert_smollm2


class ClosedLoopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: list[str] = Field(default_factory=lambda: ["bfcl"])  # corpus names or paths (tasks.corpus.ingest)
    train_domains: int = 6
    heldout_domains: int = 2
    max_domain_tools: int = 8  # prefer domains with at most this many tools (shorter prompts)
    per_domain: int = 6  # scenarios per domain
    walk_length: int = 3  # max gold calls per scenario
    heldout_scenarios: int = 4
    k: int = 2
    collect_scenarios: int = 0  # base-model rollouts on train scenarios (k=1), kept if verified
    temperature: float = 0.6  # agent sampling; > 0 so that k trials differ
    max_turns: int = 1  # one user turn: the agent calls tools (up to max_steps rounds) then answers
    max_steps: int = 4
    max_tokens: int = 96
    train_steps: int = 10  # ~50 s per step for SmolLM2-135M on a busy 2-core CPU (~1.1k-token rows)
    learning_rate: float = 2e-4
    grad_accum: int = 1
    sft_max_length: int = 2048
    torch_threads: int = 2
    base_model: str = "smollm2-135m"
    engine: str = "llama"  # both models on llama.cpp (GGUF exports), or "hf" for both on transformers
    precision: str = "f16"  # of both GGUF exports (agentscaler.gguf_export)
    seed: int = 0


# --- 1. build -------------------------------------------------------------------------------------

def choose_domains(records: list[dict[str, Any]], n_train: int, n_heldout: int, max_tools: int
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Candidate records per split, small domains first (ties by id); callers take what builds."""
    ranked = sorted(records, key=lambda r: (len(r.get("tools", [])) > max_tools, len(r.get("tools", [])),
                                            r["domain"]))
    ranked = [r for r in ranked if len(r.get("tools", [])) >= 2]
    train = [r for r in ranked if domain_split(r["domain"]) == "train"]
    held = [r for r in ranked if domain_split(r["domain"]) == "heldout"]
    return train, held


def build_workspace(ws: Workspace, cfg: ClosedLoopConfig) -> dict[str, Any]:
    """Ingest + discover + environments and scenarios for the chosen domains; returns the domain ids."""
    ing = ingest(ws, cfg.corpus)
    disc = discover(ws, cfg=DiscoverConfig(embedding="fast"), draw=False)
    tools = load_tools(ws.tools_path)
    catalog = Catalog(ws.catalog_path)
    train_c, held_c = choose_domains(load_domain_records(ws), cfg.train_domains, cfg.heldout_domains,
                                     cfg.max_domain_tools)
    chosen: dict[str, list[str]] = {"train": [], "heldout": []}
    failures: dict[str, str] = {}
    for split, cands, want in (("train", train_c, cfg.train_domains), ("heldout", held_c, cfg.heldout_domains)):
        for rec in cands:
            if len(chosen[split]) >= want:
                break
            try:
                synthesize_domain(ws, rec, tools, synth="rules", seed=cfg.seed, catalog=catalog)
                build_scenarios(ws, rec["domain"], per_domain=cfg.per_domain, max_length=cfg.walk_length,
                                seed=cfg.seed)
                got = [s for s in load_scenarios(ws, rec["domain"]) if s.split == split]
                if not got:
                    raise ValueError(f"no {split} scenarios built")
            except Exception as exc:  # noqa: BLE001 - a domain that does not build is skipped, counted
                failures[rec["domain"]] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            chosen[split].append(rec["domain"])
    if not chosen["train"] or not chosen["heldout"]:
        raise RuntimeError(f"closed loop needs train and held-out domains, built {chosen}; failures {failures}")
    return {"tools": ing.get("accepted"), "domains_discovered": disc.get("domains"), **chosen,
            "build_failures": failures}


# --- 3. gold replay -------------------------------------------------------------------------------

def gold_replay_run(ws: Workspace, domains: list[str], run_id: str = "gold-replay") -> dict[str, Any]:
    """Gold-replayed trajectories of the train-split scenarios of `domains` (tasks.rollouts.gold), verified."""
    out = gold_replay(ws, domains, run_id)
    verify = verify_run(ws, run_id)
    return {**out, "funnel": verify.get("funnel"), "passed": verify.get("passed", 0),
            "failed_reasons": sorted(r for r, n in (verify.get("reasons") or {}).items() if n)}


# --- the loop -------------------------------------------------------------------------------------

def trajectory_stats(ws: Workspace, run_id: str) -> dict[str, Any]:
    """Per run, from the trajectories (so it survives a resumed run): summed conversation and agent-LLM
    time, trials where the agent attempted a tool call (well-formed or not), format errors, executed calls."""
    trajs = load_trajectories(ws, run_id)

    def attempted(t: Trajectory) -> bool:
        return any(m.get("role") == "assistant" and (m.get("tool_calls") or "tool_call>" in str(m.get("content") or ""))
                   for m in t.messages)

    return {"conversations_s": round(sum(t.timings.get("total_s", 0.0) for t in trajs), 1),
            "agent_llm_s": round(sum(t.timings.get("agent_llm_s", 0.0) for t in trajs), 1),
            "trials_attempting_calls": sum(attempted(t) for t in trajs),
            "format_errors": sum(t.tokens.get("n_format_errors", 0) for t in trajs),
            "tool_calls_executed": sum(t.tokens.get("n_tool_calls", 0) for t in trajs)}


def _summary(report: dict[str, Any], seconds: float, ws: Workspace | None = None) -> dict[str, Any]:
    overall = (report.get("pass^k") or {}).get("overall") or {}
    overall = overall.get("pass^k", overall)  # {"1": p, "2": p, ...}
    times = trajectory_stats(ws, report["run_id"]) if ws is not None and report.get("run_id") else {}
    return {**times, "run_id": report.get("run_id"), "model": report.get("model"), "scenarios": report.get("scenarios"),
            "trials": report.get("verified"), "passed": report.get("passed"), "accuracy": report.get("accuracy"),
            "pass^k": overall, "pass^k_raw": ((report.get("pass^k_raw") or {}).get("overall") or {}).get("pass^k"),
            "excluded": (report.get("pass^k") or {}).get("excluded"), "attribution": report.get("attribution"),
            "reasons": report.get("reasons"), "end_reasons": report.get("end_reasons"), "seconds": round(seconds, 1)}


def closed_loop(ws: Workspace, cfg: ClosedLoopConfig | None = None, log: Any = print) -> dict[str, Any]:
    """Run the five phases and write reports/closed_loop.{json,md}; returns the JSON report."""
    cfg = cfg or ClosedLoopConfig()
    ws.root.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    out: dict[str, Any] = {"config": cfg.model_dump(), "phases_s": phases}

    def phase(name: str, t0: float) -> None:
        phases[name] = round(time.perf_counter() - t0, 1)
        log(f"[closed-loop] {name}: {phases[name]} s")

    t = time.perf_counter()
    out["workspace"] = build_workspace(ws, cfg)
    phase("build", t)
    held, train = out["workspace"]["heldout"], out["workspace"]["train"]
    rcfg = RolloutConfig(max_turns=cfg.max_turns, max_steps=cfg.max_steps, max_tokens=cfg.max_tokens,
                         temperature=cfg.temperature)
    eval_kw: dict[str, Any] = {"k": cfg.k, "split": "heldout", "max_scenarios": cfg.heldout_scenarios,
                               "domains": held, "cfg": rcfg, "concurrency": 1, "timeout": 300}

    t = time.perf_counter()
    collect_runs: list[str] = []
    # the base model from the same HF conversion training starts from, served like the trained one
    served = {"checkpoint": convert_smollm2(), "engine": cfg.engine, "precision": cfg.precision}
    out["runtime"] = runtime_label(**served)
    with serve(LOCAL, threads=cfg.torch_threads, model_alias=cfg.base_model, **served) as urls:
        url = urls[0]
        base = evaluate(ws, url, model=cfg.base_model, **eval_kw)
        phase("baseline_eval", t)
        out["baseline"] = _summary(base, phases["baseline_eval"], ws)
        if cfg.collect_scenarios:
            t = time.perf_counter()
            col = run_rollouts(ws, url, model=cfg.base_model, trials=1, split="train", domains=train,
                               max_scenarios=cfg.collect_scenarios, cfg=rcfg, concurrency=1, timeout=300)
            v = verify_run(ws, col["run_id"])
            collect_runs.append(col["run_id"])
            out["collected"] = {"run_id": col["run_id"], "written": col.get("written"), "funnel": v.get("funnel")}
            phase("collect", t)

    t = time.perf_counter()
    out["gold_replay"] = gold_replay_run(ws, train)
    phase("gold_replay", t)

    t = time.perf_counter()
    export = export_sft(ws, stages=(1,), run_ids=[*collect_runs, out["gold_replay"]["run_id"]],
                        max_length=cfg.sft_max_length, eval_fraction=0.1)  # an empty eval split does not load back
    out["export"] = {"kept": export.get("kept"), "dropped": export.get("dropped"),
                     "skipped_unverified": export.get("skipped_unverified")}
    conf = ws.root / "closed_loop" / "stage1.yaml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(yaml.safe_dump({
        "stage": 1, "model": cfg.base_model, "max_length": cfg.sft_max_length, "learning_rate": cfg.learning_rate,
        "lr_scheduler_type": "constant", "warmup_ratio": 0.0, "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": cfg.grad_accum, "max_steps": cfg.train_steps, "logging_steps": 5,
        "save_steps": 100_000, "save_total_limit": 1, "seed": cfg.seed, "torch_threads": cfg.torch_threads,
        "bf16": False}))
    train_res = train_stage(ws, 1, config=conf)
    out["train"] = {k: train_res.get(k) for k in ("global_step", "first_loss", "last_loss", "train_loss",
                                                   "train_seconds", "final_dir", "dataset", "model_source")}
    phase("train", t)

    t = time.perf_counter()
    trained_name = f"{cfg.base_model}-closed-loop-sft1"
    with serve(LOCAL, checkpoint=train_res["final_dir"], engine=cfg.engine, precision=cfg.precision,
               model_alias=trained_name, threads=cfg.torch_threads) as urls:
        trained = evaluate(ws, urls, model=trained_name, **eval_kw)
    phase("trained_eval", t)
    out["trained"] = _summary(trained, phases["trained_eval"], ws)
    out["heldout_scenarios_same"] = base.get("scenarios") == trained.get("scenarios")
    atomic_write_json(ws.reports_dir / "closed_loop.json", out)
    atomic_write_text(ws.reports_dir / "closed_loop.md", markdown(out))
    return out


def refresh_report(ws: Workspace) -> dict[str, Any]:
    """Recompute the conversation times of reports/closed_loop.json and rewrite it and the markdown."""
    path = ws.reports_dir / "closed_loop.json"
    out = json.loads(path.read_text())
    for side in ("baseline", "trained"):
        out[side].update(trajectory_stats(ws, out[side]["run_id"]))
        pk = out[side].get("pass^k") or {}
        out[side]["pass^k"] = pk.get("pass^k", pk)
    atomic_write_json(path, out)
    atomic_write_text(ws.reports_dir / "closed_loop.md", markdown(out))
    return out


def _t(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.1f}"


def _fmt(v: Any) -> str:
    return "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def markdown(out: dict[str, Any]) -> str:
    cfg, b, tr, ph = out["config"], out["baseline"], out["trained"], out["phases_s"]
    k = str(cfg["k"])
    gold = out["gold_replay"]
    lines = [
        "# Closed loop on CPU: SmolLM2-135M before and after stage-1 SFT", "",
        (f"Held-out domains {out['workspace']['heldout']} (never trained on); "
         f"{b['scenarios']} held-out scenarios x k={cfg['k']} trials, agent temperature {cfg['temperature']}, "
         f"scripted user, max_turns {cfg['max_turns']}, max_tokens {cfg['max_tokens']}."), "",
        f"| model | runtime | trials | passed | pass^1 | pass^{k} | eval wall (s) | conversations (s) | agent LLM (s) |",
        "|---|---|---|---|---|---|---|---|---|",
        (f"| {b['model']} (base) | {out.get('runtime', 'llama.cpp GGUF')} | {b['trials']} | {b['passed']} | {_fmt(b['pass^k'].get('1'))} "
         f"| {_fmt(b['pass^k'].get(k))} | {b['seconds']} | {_t(b.get('conversations_s'))} | {_t(b.get('agent_llm_s'))} |"),
        (f"| {tr['model']} | {out.get('runtime', 'transformers fp32 (hf_server)')} | {tr['trials']} | {tr['passed']} "
         f"| {_fmt(tr['pass^k'].get('1'))} | {_fmt(tr['pass^k'].get(k))} | {tr['seconds']} "
         f"| {_t(tr.get('conversations_s'))} | {_t(tr.get('agent_llm_s'))} |"), "",
        ("eval wall = this invocation (a resumed evaluation skips finished conversations); conversations = "
         "summed per-conversation time from the trajectories (2 in flight, so it exceeds wall time)."), "",
        "| model | trials attempting a tool call | format errors (malformed calls) | tool calls executed |",
        "|---|---|---|---|",
        *[f"| {x['model']} | {x.get('trials_attempting_calls', 'n/a')} | {x.get('format_errors', 'n/a')} "
          f"| {x.get('tool_calls_executed', 'n/a')} |" for x in (b, tr)], "",
        "Training data (stage 1, train-split domains only): "
        f"{gold['passed']}/{gold['written']} **gold-replayed** trajectories verified "
        f"(agent_model=`gold-replay`: demonstrations built from the scenarios' gold calls, not model experience)"
        + (f"; base-model rollouts: {out['collected']['funnel']}" if out.get("collected") else "; no base-model rollouts")
        + f". Export kept {out['export']['kept']}.", "",
        (f"SFT: {out['train']['global_step']} steps, loss {_fmt(out['train']['first_loss'])} -> "
         f"{_fmt(out['train']['last_loss'])}, {_t(out['train']['train_seconds'])} s."), "",
        "| phase | seconds |", "|---|---|", *[f"| {p} | {s} |" for p, s in ph.items()], "",
        f"Failure reasons, base: {b['reasons']}; trained: {tr['reasons']}.", "",
    ]
    return "\n".join(lines)
