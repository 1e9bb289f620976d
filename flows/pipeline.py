"""pipeline: the whole factory, ingest -> discover -> environments + scenarios -> experience -> SFT -> evaluation.

Each stage is its own flow (a subflow here), so the Prefect UI shows them apart and any one can
be re-run alone. Every stage skips finished work, so re-running the pipeline resumes it.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow

from agentscaler import progress
from agentscaler.artifacts import load_scenarios
from agentscaler.catalog import Catalog
from agentscaler.endpoints import is_local
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace, atomic_write_json
from flows.build_environments import build_environments_flow
from flows.closed_loop import ClosedLoopConfig, base_checkpoint, evaluate_model, gold_replay_run, trajectory_stats
from flows.collect_experience import collect_experience_flow
from flows.common import publish_markdown, run_record
from flows.discover import discover_flow
from flows.evaluate import evaluate_flow
from flows.ingest import ingest_flow
from flows.train_sft import train_sft_flow
from tasks.evaluation.compare import compare
from tasks.evaluation.compare import markdown as compare_markdown
from tasks.evaluation.eval_set import EvalSetError, choose_eval_set, eval_set_path, load_eval_set
from tasks.evaluation.report import comparison_path, funnel, funnel_markdown, funnel_runs
from tasks.evaluation.tau2 import DOMAINS, tau2_domain_dir
from tasks.rollouts.engine import select_scenarios
from training.gguf_convert import convert_smollm2

EVAL_SET = "pipeline"
UNTIL = ("ingest", "discover", "build")  # stages `until` may stop after, in order


@flow(name="pipeline")
def pipeline_flow(workspace: str, sources: list[str], synth: str = "rules", per_domain: int = 10,
                  max_length: int = 4, seed: int = 0, domains_limit: int | None = None, tau2_verticals: bool = True,
                  llm: str | None = None, model: str = "smollm2-135m", user: str = "scripted", trials: int = 1,
                  rollout_domains: int | None = None, rollout_per_domain: int | None = None,
                  gold_replay_domains: int = 0,
                  train: bool = True, max_steps: int | None = None, train_config_dir: str | None = None,
                  train_model: str | None = None, train_stages: list[int] | None = None,
                  train_budget_minutes: float | None = None, accelerate_config: str | None = None,
                  num_processes: int | None = None, build_batch_deployment: str | None = None,
                  evaluate: bool = True, k: int = 2,
                  eval_max_scenarios: int | None = 8, eval_domains: int = 2, eval_max_domains: int | None = None,
                  eval_max_prompt_tokens: int = 2048, max_turns: int = 6, agent_steps: int = 4,
                  max_tokens: int = 256, until: str | None = None) -> dict[str, Any]:
    """Run every stage (or those up to `until`: ingest, discover or build); the summary holds each
    stage's result and the funnel.

    max_steps caps SFT optimizer steps; agent_steps caps the agent's tool-call rounds per turn;
    train_model overrides the stage-1 config's model (e.g. "tiny"); accelerate_config (e.g.
    training/accelerate/zero3.yaml) trains through `accelerate launch` with num_processes processes
    (default: one per GPU of the machine); build_batch_deployment (e.g. "build-batch/build-batch")
    spreads the environment build over the pool's workers in batches; gold_replay_domains > 0 adds
    gold-replayed demonstrations (labelled agent_model="gold-replay") of that many training domains
    (plus the tau2 verticals) to the SFT data. With training and evaluation on, the trained
    checkpoint is evaluated too, on the same held-out scenarios: the closed loop. train_stages (default
    both) and train_budget_minutes (each stage's wall time, training/budget.py) size the training;
    eval_max_domains takes the held-out domains with the shortest prompts (tasks.evaluation.eval_set).
    With a local model trained, base and trained are scored the closed loop's way (flows/closed_loop:
    the same llama.cpp runtime and decoding for both, compare with intervals, single- and multi-call
    apart, failures by reason), and each stage's CPU seconds are recorded beside its wall time."""
    if until not in (None, *UNTIL):
        raise ValueError(f"until={until!r}: one of {', '.join(UNTIL)}, or None for every stage")
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    params = {k_: v for k_, v in locals().items() if k_ not in ("ws", "catalog")}
    steps = UNTIL.index(until) + 1 if until else (4 + bool(gold_replay_domains) + bool(train)
                                                 + (1 + bool(train and is_local(llm)) if evaluate else 0))
    with run_record(catalog, "pipeline", params) as summary, \
            progress.stage("pipeline", total=steps, unit="stages") as bar:
        bar.advance(0, note="ingest")
        with _timed(summary, "ingest"):
            summary["ingest"] = _brief(ingest_flow(str(ws.root), sources))
        if until == "ingest":
            return summary
        bar.advance(note="discover")
        with _timed(summary, "discover"):
            summary["discover"] = _brief(discover_flow(str(ws.root)))
        if until == "discover":
            return summary
        bar.advance(note="build")
        with _timed(summary, "build"):
            summary["build"] = build_environments_flow(str(ws.root), synth=synth, seed=seed, per_domain=per_domain,
                                                       max_length=max_length, limit=domains_limit,
                                                       batch_deployment=build_batch_deployment)
            if tau2_verticals and "tau2" in sources:
                summary["tau2"] = add_tau2_verticals(ws)
        if until == "build":  # environments and scenarios: what the factory makes before any model runs
            summary["failed"] = dict(summary["build"].get("failed", {}))
            summary["failures"] = dict(summary["build"].get("failures", {}))
            return summary
        train_domains = _domains_with(ws, "train")[:rollout_domains] if rollout_domains else None
        bar.advance(note="collect")
        with _timed(summary, "collect"):
            summary["experience"] = collect_experience_flow(str(ws.root), llm=llm, model=model, user=user,
                                                            trials=trials, split="train", per_domain=rollout_per_domain,
                                                            domains=train_domains, max_turns=max_turns,
                                                            max_steps=agent_steps, max_tokens=max_tokens)
        if gold_replay_domains:
            bar.advance(note="gold replay")
            replay = _domains_with(ws, "train")
            replay = [d for d in replay if not d.startswith("tau2")][:gold_replay_domains] + \
                [d for d in replay if d.startswith("tau2")]
            with _timed(summary, "gold_replay"):
                summary["gold_replay"] = _brief(gold_replay_run(ws, replay))
        if train:
            bar.advance(note="train")
            with _timed(summary, "train"):
                summary["train"] = train_sft_flow(str(ws.root), stages=train_stages, max_steps=max_steps,
                                                  config_dir=train_config_dir, model=train_model,
                                                  accelerate_config=accelerate_config, num_processes=num_processes,
                                                  budget_minutes=train_budget_minutes)
        if evaluate:
            bar.advance(note="evaluate")
            # One evaluation set (written once) for every model scored, so base and trained see the same scenarios.
            summary["eval_set"] = _eval_set(ws, eval_max_scenarios, eval_domains, eval_max_domains,
                                            eval_max_prompt_tokens)
            eval_args = dict(k=k, max_turns=max_turns, max_steps=agent_steps, max_tokens=max_tokens,
                             eval_set=EVAL_SET if summary["eval_set"] else None,
                             max_scenarios=None if summary["eval_set"] else eval_max_scenarios)
            checkpoint = _trained_checkpoint(summary.get("train"))
            if checkpoint and is_local(llm) and summary["eval_set"]:
                # the closed loop's comparison (flows/closed_loop): same runtime, decoding and scenarios for both
                _closed_loop_comparison(ws, summary, bar, Path(checkpoint), train_model or model, k, max_turns,
                                        agent_steps, max_tokens)
            else:
                both = bool(checkpoint) and is_local(llm)
                # compared with a trained model, the base model is served the same way: its HF conversion
                # (what training starts from) exported at the same precision (agentscaler.endpoints.serve)
                base_ckpt = str(convert_smollm2()) if both else None
                with _timed(summary, "evaluate_base"):
                    base = evaluate_flow(str(ws.root), llm=llm, model=model, checkpoint=base_ckpt, **eval_args)
                summary["evaluate"] = _brief(base)
                if both:
                    bar.advance(note="evaluate the trained model")
                    with _timed(summary, "evaluate_trained"):
                        trained = evaluate_flow(str(ws.root), llm="local", model="trained", checkpoint=checkpoint,
                                                **eval_args)
                    summary["evaluate_trained"] = _brief(trained)
                    comparison = compare(base, trained)
                    atomic_write_json(comparison_path(ws, "pipeline"), comparison)
                    publish_markdown("base-vs-trained", compare_markdown(comparison), "the same held-out scenarios")
            summary["closed_loop"] = closed_loop_table(summary)
        bar.advance(note="done")
        runs = (summary["experience"].get("run_ids") or []) + ([summary["gold_replay"]["run_id"]]
                                                              if summary.get("gold_replay") else [])
        summary["funnel"] = funnel(ws, runs)  # the trajectories of this run's rollouts, never evaluations
        summary["funnel_runs"] = funnel_runs(ws, runs)  # which run each count comes from
        summary["failed"] = {**summary["build"].get("failed", {}), **summary["experience"].get("failed", {})}
        summary["failures"] = {**summary["build"].get("failures", {}), **summary["experience"].get("failures", {})}
        publish_markdown("pipeline-funnel", "# funnel\n\n" + funnel_markdown(summary["funnel"], summary["funnel_runs"]),
                         "tools -> ... -> SFT rows, agent vs gold replay")
    return summary


@contextmanager
def _timed(summary: dict[str, Any], stage: str) -> Iterator[None]:
    """Record the stage's wall time in summary["stage_wall_s"] and its CPU time in summary["stage_cpu_s"]
    (the demo's per-stage figures, bench_demo). CPU = this process plus the children it reaped during the
    stage (training process, model servers): on a shared machine wall time is inflated by the others'
    load, CPU time much less so. Sandbox workers' CPU is mostly missing (they run in their own pid
    namespace and outlive the stage), so build, collect and gold replay read low."""
    t0, c0 = time.perf_counter(), _cpu_seconds()
    try:
        yield
    finally:
        summary.setdefault("stage_wall_s", {})[stage] = round(time.perf_counter() - t0, 1)
        summary.setdefault("stage_cpu_s", {})[stage] = round(_cpu_seconds() - c0, 1)


def _cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _closed_loop_comparison(ws: Workspace, summary: dict[str, Any], bar: Any, checkpoint: Path, base_model: str,
                            k: int, max_turns: int, agent_steps: int, max_tokens: int) -> None:
    """Base and trained model on the pipeline's evaluation set by flows/closed_loop's evaluate_model (the
    same llama.cpp runtime, precision, servers and decoding for both) and its compare; fills the summary's
    evaluate / evaluate_trained / comparison / evaluation_cost."""
    cfg = ClosedLoopConfig(eval_set=EVAL_SET, k=k, max_turns=max_turns, max_steps=agent_steps,
                           max_tokens=max_tokens, tau2=False, base_model=base_model)
    stages = (summary.get("train") or {}).get("train") or {}
    key = next((stages[s]["key"] for s in ("stage2", "stage1") if (stages.get(s) or {}).get("key")), None)
    # named by its training key: a retrained checkpoint is never answered by an older one's evaluation
    trained_name = f"{base_model}-sft-{(key or content_hash({'checkpoint': str(checkpoint)}))[:8]}"

    def log(msg: str) -> None:  # to the progress display (stderr), never stdout: `demo --json` prints there
        bar.advance(0, note=msg.removeprefix("[closed-loop] "))

    with _timed(summary, "evaluate_base"):
        base = evaluate_model(ws, cfg, base_checkpoint(ws, base_model), f"{base_model}-base", k, log=log)["heldout"]
    bar.advance(note="evaluate the trained model")
    with _timed(summary, "evaluate_trained"):
        trained = evaluate_model(ws, cfg, checkpoint, trained_name, k, log=log)["heldout"]
    summary["evaluate"], summary["evaluate_trained"] = _brief(base), _brief(trained)
    summary["comparison"] = compare(base, trained)
    summary["evaluation_cost"] = {"base": trajectory_stats(ws, base["run_id"]),
                                  "trained": trajectory_stats(ws, trained["run_id"])}
    atomic_write_json(comparison_path(ws, "pipeline"), summary["comparison"])
    publish_markdown("base-vs-trained", compare_markdown(summary["comparison"]), "the same held-out scenarios")


def add_tau2_verticals(ws: Workspace) -> dict[str, Any]:
    """The stage-2 verticals: tau2 airline/retail as our environments, with tau2's tasks as scenarios.

    tau2's train-split tasks are training scenarios (stage 2, target verticals); its test-split
    tasks are held out for `agentscaler evaluate --tau2`."""
    out: dict[str, Any] = {}
    for name in DOMAINS:
        d = tau2_domain_dir(ws, name).name
        rows = load_scenarios(ws, d)
        out[d] = {"train": sum(s.split == "train" for s in rows), "heldout": sum(s.split == "heldout" for s in rows)}
    return out


def _eval_set(ws: Workspace, scenarios: int | None, domains: int, max_domains: int | None = None,
              max_prompt_tokens: int = 2048) -> dict[str, Any] | None:
    """The pipeline's evaluation set (reports/eval-set-pipeline.json): chosen once, reused by a re-run;
    None when the workspace holds too few held-out scenarios (the evaluation then takes the first ones)."""
    if eval_set_path(ws, EVAL_SET).exists():
        return load_eval_set(ws, EVAL_SET)
    try:
        return choose_eval_set(ws, scenarios=scenarios or 8, min_domains=domains, name=EVAL_SET,
                               max_domains=max_domains, max_prompt_tokens=max_prompt_tokens)
    except EvalSetError:
        return None


def _trained_checkpoint(train: dict[str, Any] | None) -> str | None:
    """The last trained stage's final model folder, if any stage trained."""
    for stage in ("stage2", "stage1"):
        result = ((train or {}).get("train") or {}).get(stage) or {}
        if result.get("final_dir"):
            return str(result["final_dir"])
    return None


def closed_loop_table(summary: dict[str, Any]) -> dict[str, Any]:
    """Before/after on the same held-out scenarios: pass^1..k with 95% intervals, trials, wall time."""
    out: dict[str, Any] = {}
    for name, key in (("baseline", "evaluate"), ("trained", "evaluate_trained")):
        rep = summary.get(key)
        if rep:
            overall = (rep.get("pass^k") or {}).get("overall") or {}
            out[name] = {"pass^k": overall.get("pass^k"), "scenarios": overall.get("scenarios"),
                         "trials": overall.get("trials"), "wall_s": rep.get("wall_s"),
                         "intervals": ((rep.get("intervals") or {}).get("overall") or {}).get("pass^k")}
    return out


def _domains_with(ws: Workspace, split: str) -> list[str]:
    return [d for d in ws.domain_ids() if select_scenarios(ws, split, 1, [d])]


def _brief(result: dict[str, Any]) -> dict[str, Any]:
    """Drop bulky per-item lists from a stage result kept in the pipeline summary."""
    return {k: v for k, v in result.items() if not isinstance(v, list) or len(v) <= 20}

