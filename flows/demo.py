"""`make demo`: the whole factory on the embedded default, sized to a time budget on 2 cores (20 minutes by default).

Real corpora (BFCL, tau2, NESTFUL from their PyPI packages), rule-based synthesis, scripted user,
the local SmolLM2-135M server as the agent, a short CPU SFT run of SmolLM2-135M, evaluation of the
base and the trained model on the same held-out scenarios, and the report (with that before/after
comparison and the scenarios used). Every stage resumes, so a second `make demo` is quick.

How `--minutes` sizes the run (`demo_plan`): a cost model in seconds per unit of work (COSTS:
round figures that add up to the quiet 19-minute demo of the README, not per-stage measurements)
prices a plan; the smallest plan (MINIMUM) must fit, then the knobs fill one after another (GROWTH:
first every domain, then evaluation scenarios, rollouts and gold replays up to the default demo,
then more evaluation and rollouts) while the plan still fits. A smaller budget builds fewer domains and evaluates fewer
scenarios; a larger one evaluates more and rolls out more. Training stays at two optimizer steps
per stage (already most of the fixed cost). The estimate is for a quiet machine: a loaded one
takes longer, and the result says how long the run took against its budget.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from agentscaler.workspace import Workspace, atomic_write_json
from flows.pipeline import pipeline_flow
from tasks.evaluation.report import demo_path, write_report

DEMO = {
    "sources": ["bfcl", "tau2", "nestful"],
    "synth": "rules",
    "per_domain": 8,
    "max_length": 4,
    "llm": "local",
    "user": "scripted",
    "trials": 1,
    "domains_limit": None,  # None: every discovered domain (about 222 from the real corpora)
    "rollout_domains": 4,
    "rollout_per_domain": 1,
    "gold_replay_domains": 20,  # demonstrations from gold calls, labelled agent_model="gold-replay"
    "train": True,
    "max_steps": 2,  # optimizer steps per SFT stage: ~40 s (stage 1) to ~90 s (stage 2) each on 2 cores
    "train_config_dir": "cpu-demo",  # training/configs/cpu-demo/: small steps for 2 CPU cores
    "evaluate": True,
    "k": 2,
    "eval_max_scenarios": 3,  # the demo's evaluation set: 3 held-out scenarios from >= 3 held-out domains (demo_plan(20))
    "eval_domains": 3,
    # SmolLM2-135M on 2 cores: short conversations keep the demo inside its time budget.
    "max_turns": 3,
    "agent_steps": 3,
    "max_tokens": 160,
}

DOMAINS = 222  # domains discovered in the real corpora (README funnel)
COSTS = {  # seconds on 2 quiet cores, per unit
    "fixed": 120,  # fetch (cached), ingest, discover, tau2 verticals, Prefect and LLM server starts, report
    "domain": 1.0,  # synthesize + validate + scenarios
    "conversation": 40,  # one SmolLM2 rollout, short conversation
    "replay_domain": 0.5,  # gold replays of one domain's train scenarios
    "train_stage": 45,  # model load, conversion, save (x2 stages)
    "train_step": 20,  # one optimizer step (x max_steps x 2 stages)
    "eval_trial": 75,  # one trial of the base (llama.cpp) plus one of the trained model (transformers)
}
MINIMUM = {"domains_limit": 30, "rollout_domains": 1, "gold_replay_domains": 5, "eval_max_scenarios": 1}
GROWTH = [  # (knob, step, cap), filled in this order; the first that cannot reach its cap ends the plan
    ("domains_limit", 24, DOMAINS), ("eval_max_scenarios", 1, 3), ("rollout_domains", 1, 4),
    ("gold_replay_domains", 5, 20),  # = the default demo (DEMO): every domain
    ("eval_max_scenarios", 1, 8), ("rollout_domains", 2, 16),  # beyond it: more evaluation and experience
]


def plan_seconds(plan: dict[str, Any]) -> float:
    """The cost model's estimate of a plan's wall time on 2 quiet cores."""
    domains = plan["domains_limit"] or DOMAINS
    return (COSTS["fixed"] + COSTS["domain"] * domains + COSTS["conversation"] * plan["rollout_domains"]
            + COSTS["replay_domain"] * plan["gold_replay_domains"]
            + 2 * (COSTS["train_stage"] + COSTS["train_step"] * plan["max_steps"])
            + COSTS["eval_trial"] * plan["k"] * plan["eval_max_scenarios"])


def demo_plan(minutes: float) -> dict[str, Any]:
    """The demo's pipeline parameters sized to `minutes` (see the module docstring)."""
    budget = minutes * 60
    plan = {**DEMO, **MINIMUM}
    need = plan_seconds(plan)
    if need > budget:
        raise ValueError(f"the demo needs at least {math.ceil(need / 60)} minutes on 2 cores "
                         f"(its smallest run: {MINIMUM}); got --minutes {minutes}")
    for knob, step, cap in GROWTH:
        while plan[knob] < cap:
            trial = {**plan, knob: min(cap, plan[knob] + step)}
            if plan_seconds(trial) > budget:
                break
            plan = trial
        if plan[knob] < cap:
            break  # filled in order: a larger budget never plans less of anything
    if plan["domains_limit"] >= DOMAINS:
        plan["domains_limit"] = None  # every domain
    return plan


def run_demo(workspace: Path, minutes: float = 20, **overrides: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    params = {**demo_plan(minutes), **overrides}
    summary = pipeline_flow(str(workspace), **params)
    evaluations = {f"before: base model ({params['k']} trials)": (summary.get("evaluate") or {}).get("run_id"),
                   f"after: trained model ({params['k']} trials)": (summary.get("evaluate_trained") or {}).get("run_id")}
    report = write_report(Workspace(workspace), None, {k: v for k, v in evaluations.items() if v})
    wall = round(time.perf_counter() - t0, 1)
    out = {"funnel": summary["funnel"], "funnel_runs": summary.get("funnel_runs"),
           "failed": summary.get("failed", {}), "failures": summary.get("failures", {}),
           "report": report.get("markdown"), "closed_loop": summary.get("closed_loop"),
           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "load": [round(x, 2) for x in os.getloadavg()],  # 1/5/15-minute load at the end: figures on a busy machine
           "wall_s": wall, "stage_wall_s": summary.get("stage_wall_s", {}), "run_id": summary["run_id"],
           "budget": {"minutes": minutes, "planned_s": round(plan_seconds(params)), "wall_s": wall,
                      "plan": {k: params[k] for k in ("domains_limit", "rollout_domains", "gold_replay_domains",
                                                      "eval_max_scenarios", "k", "max_steps")}}}
    atomic_write_json(demo_path(Workspace(workspace)), out)
    return out
