"""`make demo`: the whole factory on the embedded default, sized to a time budget on 2 cores (15 minutes by default).

Real corpora (BFCL, tau2, NESTFUL from their PyPI packages), rule-based synthesis, scripted user,
the local SmolLM2-135M server as the agent, a CPU SFT run of SmolLM2-135M sized by wall time
(training/budget.py), and a small version of the closed loop's comparison (flows/closed_loop, issue
19): base and trained model on the same held-out scenarios, served by the same llama.cpp runtime
with the same constrained tool-call decoding, pass^1..k with 95% bootstrap intervals, single- and
multi-call apart, failures by reason. The report holds the funnel (agent experience and gold replays
in their own columns) and that comparison. Every stage resumes, so a second `make demo` is quick.

The evaluation set is `eval_max_scenarios` held-out scenarios from the held-out domains with the
shortest agent prompts (EVAL_PER_DOMAIN each, so a few domains): each domain's prompt is
processed once per server and then served from the llama.cpp prompt cache (issue 19's prefix reuse).
Only stage 1 (the general domains the evaluation measures) is trained; stage 2 (the tau2 verticals,
rows up to 6k tokens) is left to `agentscaler train`.

How `--minutes` sizes the run (`demo_plan`): a cost model in seconds per unit of work (COSTS) prices
a plan; the smallest plan (MINIMUM) must fit, then the knobs fill one after another (GROWTH: first
every domain, then evaluation scenarios, training time, rollouts and gold replays up to the default
demo, then more of each) while the plan still fits. COSTS are estimates for 2 quiet cores (each
figure's comment says where it comes from: the evaluation's from CPU seconds per trial measured on a
loaded machine, the others round figures from earlier demos); a loaded machine takes longer, and the
result says how long the run took against its budget, per stage in wall and CPU seconds (pipeline
`stage_cpu_s`), to check them.
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

EVAL_PER_DOMAIN = 3  # held-out scenarios per evaluation domain: few domains, so the prompt cache serves most

DEMO = {
    "sources": ["bfcl", "tau2", "nestful"],
    "synth": "rules",
    "per_domain": 8,
    "max_length": 4,
    "llm": "local",
    "user": "scripted",
    "trials": 1,
    "domains_limit": None,  # None: every discovered domain (about 222 from the real corpora)
    "rollout_domains": 2,
    "rollout_per_domain": 1,
    "gold_replay_domains": 20,  # demonstrations from gold calls, labelled agent_model="gold-replay"
    "train": True,
    "train_stages": [1],  # the general domains the evaluation measures; stage 2 (tau2) by `agentscaler train`
    # stage 1's wall time on the clock (training/budget.py): a few optimizer steps of batch 1 (a 1.7k-3.8k-token
    # row cost 40-50 CPU s per 1,000 tokens, measured loaded), enough to show the loop, not to teach the agent
    "train_budget_minutes": 1.5,
    "max_steps": None,  # the budget decides
    "train_config_dir": "cpu-demo",  # training/configs/cpu-demo/: small steps for 2 CPU cores
    "evaluate": True,
    "k": 2,
    "eval_max_scenarios": 12,  # held-out scenarios, EVAL_PER_DOMAIN from each of the shortest-prompt domains
    "eval_domains": 2,
    "eval_max_domains": 4,
    # the real corpora's held-out domains: 8 of 58 have prompts <= 1024 tokens, 12 <= 1280 (all at the end of
    # discovery's order, so a build of fewer domains may have too few; the evaluation then takes the first ones)
    "eval_max_prompt_tokens": 1280,
    # SmolLM2-135M on 2 cores: short conversations keep the demo inside its time budget. One user turn: the
    # agent's one reply (with up to agent_steps tool-call rounds) is what is scored; each further turn cost
    # about as much again (3 turns: about 35 CPU seconds per trial of the base model, measured loaded). 96 tokens
    # hold a tool call or a short answer; the base model fills whatever it is given with text.
    "max_turns": 1,
    "agent_steps": 3,
    "max_tokens": 96,
}

DOMAINS = 222  # domains discovered in the real corpora (README funnel)
COSTS = {  # seconds on 2 quiet cores, per unit
    "fixed": 120,  # fetch (cached), ingest, discover, tau2 verticals, Prefect and LLM server starts, report
    "domain": 0.7,  # synthesize + validate + scenarios (223 s for 222 domains in the last demo, loaded, before the faster build)
    "conversation": 30,  # one SmolLM2 rollout, one user turn
    "replay_domain": 0.5,  # gold replays of one domain's train scenarios
    "train_stage": 60,  # model load, dataset, final validation, save (one stage)
    "eval_model": 30,  # per model compared: GGUF export of the checkpoint, two server starts
    # one trial of one model, two one-thread servers side by side (prefix reuse): 15-18 CPU seconds per trial
    # of the base model measured at load 6-9 (one user turn, 128 tokens, prompts of 560-1020 tokens), so about
    # 8 s of wall time per trial on quiet cores, less for 96 tokens
    "eval_trial": 7,
}
MINIMUM = {"domains_limit": 30, "rollout_domains": 1, "gold_replay_domains": 5, "eval_max_scenarios": 6,
           "train_budget_minutes": 1.0}
GROWTH = [  # (knob, step, cap), filled in this order; the first that cannot reach its cap ends the plan
    ("domains_limit", 24, DOMAINS), ("eval_max_scenarios", EVAL_PER_DOMAIN, 12), ("train_budget_minutes", 0.5, 1.5),
    ("rollout_domains", 1, 2), ("gold_replay_domains", 5, 20),  # = the default demo (DEMO)
    ("eval_max_scenarios", EVAL_PER_DOMAIN, 24), ("train_budget_minutes", 1.0, 10.0),
    ("rollout_domains", 2, 16),  # beyond it: more evaluation, training and experience
]


def plan_seconds(plan: dict[str, Any]) -> float:
    """The cost model's estimate of a plan's wall time on 2 quiet cores."""
    domains = plan["domains_limit"] or DOMAINS
    stages = len(plan.get("train_stages") or [1, 2])
    return (COSTS["fixed"] + COSTS["domain"] * domains + COSTS["conversation"] * plan["rollout_domains"]
            + COSTS["replay_domain"] * plan["gold_replay_domains"]
            + stages * (COSTS["train_stage"] + 60 * plan["train_budget_minutes"])
            + 2 * (COSTS["eval_model"] + COSTS["eval_trial"] * plan["k"] * plan["eval_max_scenarios"]))


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
    # a few domains with short prompts, EVAL_PER_DOMAIN scenarios each (tasks.evaluation.eval_set)
    plan["eval_max_domains"] = max(plan["eval_domains"], math.ceil(plan["eval_max_scenarios"] / EVAL_PER_DOMAIN))
    return plan


PLAN_KEYS = ("domains_limit", "rollout_domains", "gold_replay_domains", "eval_max_scenarios", "k", "max_steps",
             "train_stages", "train_budget_minutes", "eval_max_domains", "eval_max_prompt_tokens")


def run_demo(workspace: Path, minutes: float = 15, **overrides: Any) -> dict[str, Any]:
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
           # CPU seconds per stage (this process and the children it reaped): the work, apart from the load
           "stage_cpu_s": summary.get("stage_cpu_s", {}),
           # the closed loop's comparison (tasks.evaluation.compare): intervals, single/multi-call, reasons
           "comparison": summary.get("comparison"), "evaluation_cost": summary.get("evaluation_cost"),
           "eval_set": {k: v for k, v in (summary.get("eval_set") or {}).items() if k != "scenario_ids"} or None,
           "budget": {"minutes": minutes, "planned_s": round(plan_seconds(params)), "wall_s": wall,
                      "plan": {k: params[k] for k in PLAN_KEYS}}}
    atomic_write_json(demo_path(Workspace(workspace)), out)
    return out
