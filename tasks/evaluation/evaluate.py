"""Held-out evaluation: a model's pass^1..pass^k per domain and overall, accuracy by number of
gold tool calls, and failure attribution, on held-out scenarios (or tau2's airline/retail tasks).

One evaluation = one rollout run with k trials per scenario (tasks.rollouts.engine), with users
that never see the gold state (no goal check: RolloutConfig.goal_check is forced off), verified by
tasks.verify.verify (final-state match, exact calls for read-only scenarios, attribution). On tau2
domains the pass criterion is tau2's own (tasks.evaluation.tau2: DB state x required information
communicated). pass^k = C(c,k)/C(n,k) from tasks.verify.passk, averaged over scenarios; trials whose
failure is the user simulator's or the environment's are left out of pass^k (reported as
`pass^k_raw` with them).

Every pass^k comes with a 95% bootstrap interval over scenarios (tasks.evaluation.intervals),
overall and for single-call and multi-call scenarios apart; failures are counted by reason and by
scenario length (gold calls), and `diagnostics` says how far the agent got (tried a call, named
the first gold tool, made the first gold call exactly). `scenario_ids` pins the scenarios (an
evaluation set, tasks.evaluation.eval_set), so two models are scored on the same ones.

Output: `<ws>/reports/eval-<run>.json`.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler.artifacts import load_scenarios, load_trajectories, scenario_map
from agentscaler.models import Scenario, Trajectory
from agentscaler.naming import snake
from agentscaler.workspace import Workspace, atomic_write_json
from tasks.evaluation.intervals import passk_intervals
from tasks.evaluation.tau2 import DOMAINS, agent_calls, agreement, score_run, tau2_domain_dir
from tasks.rollouts.conversation import RolloutConfig
from tasks.rollouts.engine import run_rollouts
from tasks.verify.passk import passk_report, scenario_counts
from tasks.verify.verify import call_key, verify_run, verify_trajectories


def eval_path(ws: Workspace, run_id: str) -> Path:
    return ws.reports_dir / f"eval-{run_id}.json"


def result_rows(trajectories: list[Trajectory], scenarios: dict[str, Scenario]) -> list[dict[str, Any]]:
    """One row per verified trajectory: the input of tasks.verify.passk.passk_report."""
    rows = []
    for t in trajectories:
        if t.verdict is None:
            continue
        s = scenarios.get(t.scenario_id)
        rows.append({"scenario_id": t.scenario_id, "domain": t.domain, "passed": t.verdict.passed,
                     "attribution": t.verdict.attribution, "n_gold_calls": len(s.gold_calls) if s else 0,
                     "read_only": bool(s.read_only) if s else None, "reasons": list(t.verdict.reasons)})
    return rows


# What can be wrong with the arguments of a first call that names the first gold tool.
ARGUMENT_ERRORS = ("missing", "empty_value", "wrong_value", "extra")


def _wrong(args: dict[str, Any], gold: dict[str, Any]) -> list[str]:
    """Gold's arguments that a call left out or gave another value (compared as call_key compares them)."""
    return [k for k in gold if k not in args or call_key("", {k: args[k]}) != call_key("", {k: gold[k]})]


def argument_errors(args: dict[str, Any], gold: dict[str, Any]) -> list[str]:
    """What is wrong with a call's arguments against the gold call's, by ARGUMENT_ERRORS: a gold
    argument left out, given as an empty string (gold's is not), given another value, or an
    argument gold lacks. [] when they are the same call."""
    wrong = _wrong(args, gold)
    given = [k for k in wrong if k in args]
    found = {"missing": len(given) < len(wrong), "empty_value": any(args[k] == "" for k in given),
             "wrong_value": any(args[k] != "" for k in given), "extra": any(k not in gold for k in args)}
    return [kind for kind in ARGUMENT_ERRORS if found[kind]]


def _leaves(v: Any) -> list[str]:
    """The texts a user would say for a value: its strings and numbers (an integral float as an
    integer), inside lists and objects too; booleans and nulls have none."""
    if isinstance(v, dict):
        return [x for item in v.values() for x in _leaves(item)]
    if isinstance(v, list):
        return [x for item in v for x in _leaves(item)]
    if isinstance(v, bool) or v is None:
        return []
    if isinstance(v, float) and v.is_integer():
        return [str(int(v))]
    return [str(v)]


def values_stated(args: dict[str, Any], gold: dict[str, Any], user_text: str) -> bool:
    """Whether the user had said every gold value the call got wrong (left out or other) before it:
    the agent had what it needed, and copying it is what failed."""
    texts = [x.casefold() for k in _wrong(args, gold) for x in _leaves(gold[k])]
    said = user_text.casefold()
    return bool(texts) and all(x in said for x in texts)


def _user_text_before_first_call(messages: list[dict[str, Any]]) -> str:
    said = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            break
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            said.append(m["content"])
    return "\n".join(said)


def _words(text: str) -> set[str]:
    """Lower-case words, with camelCase and snake_case names split (getFlightStatus, get_flight)."""
    return set(snake(text).split("_")) - {""}


def text_match_tool(request: str, tools: list[dict[str, Any]]) -> str | None:
    """The tool a bag-of-words picker names for a request, with no model: the most words shared with
    the tool's name and description, over the square root of the description's length (a long
    description does not win by length alone); ties go to the first listed. A reference for how
    hard the first tool is to pick from the user's words: set beside a model's right first tool, it
    says whether the model fails at a choice the words make plain."""
    said, best, top = _words(request), None, 0.0
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict):
            continue  # not a tool schema: nothing to match
        name, desc = str(fn.get("name") or ""), str(fn.get("description") or "")
        score = len(said & _words(f"{name} {desc}")) / math.sqrt(1 + len(_words(desc)))
        if name and score > top:
            best, top = name, score
    return best


def _first_user_text(messages: list[dict[str, Any]]) -> str:
    return next((m["content"] for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)), "")


def diagnose(t: Trajectory, s: Scenario | None) -> dict[str, Any]:
    """How far the agent got on one trial: tried a tool call (well-formed or not), made a well-formed
    one, named the first gold tool first, made the first gold call exactly (name and arguments), and
    when it named the right tool with other arguments, what was wrong with them (argument_errors)
    and whether the user had said the values it got wrong before the call (values_stated). Beside
    the agent, text_match_first_tool: whether text_match_tool, given the user's first message and
    the tools the agent saw, names the first gold tool."""
    said = [m for m in t.messages if m.get("role") == "assistant"]
    tried = any(m.get("tool_calls") or "tool_call>" in str(m.get("content") or "") for m in said)
    calls = agent_calls(t.messages)
    right_tool = right_call = stated = False
    errors: list[str] = []
    text_match = bool(s is not None and s.gold_calls
                      and text_match_tool(_first_user_text(t.messages), t.tools) == s.gold_calls[0].name)
    if calls and s is not None and s.gold_calls:
        first, gold = calls[0], s.gold_calls[0]
        right_tool = first["name"] == gold.name
        right_call = right_tool and call_key(first["name"], first["arguments"]) == call_key(gold.name, gold.arguments)
        if right_tool and not right_call:
            errors = argument_errors(first["arguments"], gold.arguments)
            stated = values_stated(first["arguments"], gold.arguments, _user_text_before_first_call(t.messages))
    return {"tried_call": tried, "well_formed_call": bool(calls), "right_first_tool": right_tool,
            "right_first_call": right_call, "argument_errors": errors, "values_stated": stated,
            "text_match_first_tool": text_match}


DIAGNOSTICS = ("tried_call", "well_formed_call", "right_first_tool", "right_first_call", "text_match_first_tool")


def diagnostics(diag: list[dict[str, Any]]) -> dict[str, Any]:
    """diagnose's trials counted: trials per step reached, and first calls with the right tool but
    other arguments by what was wrong (a call can be wrong in several ways) and how many of them
    got wrong only values the user had said before the call."""
    return {**{key: sum(d[key] for d in diag) for key in DIAGNOSTICS},
            "first_call_arguments": {**{kind: sum(kind in d["argument_errors"] for d in diag) for kind in ARGUMENT_ERRORS},
                                     "values_stated": sum(d["values_stated"] for d in diag)}}


def run_diagnostics(ws: Workspace, run_id: str) -> dict[str, Any]:
    """diagnostics of a verified run, from its trajectories (for a report written before a count
    was added to it)."""
    trajs = [t for t in load_trajectories(ws, run_id) if t.verdict is not None]
    scenarios = scenario_map(ws, {t.domain for t in trajs})
    return diagnostics([diagnose(t, scenarios.get(t.scenario_id)) for t in trajs])


def _group(rows: list[dict[str, Any]], k: int | None) -> dict[str, Any]:
    """pass^1..k with intervals, trials, passes and failure reasons of a group of rows."""
    counts = scenario_counts(rows)
    top = k or max((n for n, _ in counts.values()), default=1)
    return {"scenarios": len(counts), "trials": sum(n for n, _ in counts.values()),
            "passed": sum(c for _, c in counts.values()), "pass^k": passk_intervals(counts, top),
            "reasons": dict(Counter(r for row in rows if not row["passed"] for r in row["reasons"]).most_common())}


GROUPS = {"overall": lambda r: True, "single_call": lambda r: r["n_gold_calls"] == 1,
          "multi_call": lambda r: r["n_gold_calls"] > 1}


def breakdown(rows: list[dict[str, Any]], k: int | None) -> dict[str, Any]:
    """Overall, single-call and multi-call scenarios apart, and by scenario length (gold calls)."""
    out = {name: _group([r for r in rows if keep(r)], k) for name, keep in GROUPS.items()}
    out["by_length"] = {str(n): _group([r for r in rows if r["n_gold_calls"] == n], k)
                        for n in sorted({r["n_gold_calls"] for r in rows})}
    return out


def summarize(trajectories: list[Trajectory], scenarios: dict[str, Scenario], k: int | None = None) -> dict[str, Any]:
    """pass^k (agent-only and raw), accuracy by gold calls, attribution and reasons of a set of verified trajectories."""
    rows = result_rows(trajectories, scenarios)
    failed = [t.verdict for t in trajectories if t.verdict is not None and not t.verdict.passed]
    by_kind: dict[str, list[int]] = {}
    for r in rows:
        cell = by_kind.setdefault("read_only" if r["read_only"] else "write", [0, 0])
        cell[0] += 1
        cell[1] += int(r["passed"])
    passed = sum(r["passed"] for r in rows)
    diag = [diagnose(t, scenarios.get(t.scenario_id)) for t in trajectories if t.verdict is not None]
    return {"trajectories": len(trajectories), "verified": len(rows), "passed": passed,
            "intervals": breakdown(rows, k),
            "scenario_counts": {name: {key: list(nc) for key, nc in scenario_counts([r for r in rows if keep(r)]).items()}
                                for name, keep in GROUPS.items()},
            "diagnostics": diagnostics(diag),
            "accuracy": round(passed / len(rows), 6) if rows else None,
            "unverified": len(trajectories) - len(rows),
            "pass^k": passk_report(rows, max_k=k), "pass^k_raw": passk_report(rows, max_k=k, agent_only=False),
            "by_kind": {kind: {"trials": n, "accuracy": round(c / n, 6)} for kind, (n, c) in sorted(by_kind.items())},
            "attribution": dict(Counter(v.attribution for v in failed)),
            "reasons": dict(Counter(r for v in failed for r in v.reasons)),
            "end_reasons": dict(Counter(t.end_reason for t in trajectories))}


def evaluate_run(ws: Workspace, run_id: str, k: int | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Verify a finished rollout run (tau2 domains scored as tau2 does) and write reports/eval-<run>.json."""
    verify = verify_run(ws, run_id)
    report = {"run_id": run_id, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(meta or {}),
              **score(ws, load_trajectories(ws, run_id), k), "verify_funnel": verify.get("funnel")}
    atomic_write_json(eval_path(ws, run_id), report)
    return report


def score(ws: Workspace, trajs: list[Trajectory], k: int | None) -> dict[str, Any]:
    """The figures of verified trajectories: tau2 domains scored as tau2 scores them, then summarize."""
    scenarios = scenario_map(ws, {t.domain for t in trajs})
    tau2 = [t for t in trajs if t.domain.startswith("tau2_")]
    if tau2:  # tau2's reward replaces our verdict on its domains (our reasons kept for the record)
        ours = {t.id: t.verdict for t in trajs}
        rescored = {t.id: t for t in score_run(tau2, scenarios)}
        trajs = [rescored.get(t.id, t) for t in trajs]
        for t in trajs:
            v, o = t.verdict, ours.get(t.id)
            if t.id in rescored and v is not None and o is not None and not v.passed and o.attribution != "none":
                v.attribution = o.attribution  # whose fault: verify's analysis (user, environment, agent)
    return {"k": k, "domains": sorted({t.domain for t in trajs}), "scenarios": len({t.scenario_id for t in trajs}),
            "scenario_ids": sorted({t.scenario_id for t in trajs}), **summarize(trajs, scenarios, k),
            "tau2_scored": len(tau2)}


def score_unwritten(ws: Workspace, trajs: list[Trajectory], k: int | None) -> dict[str, Any]:
    """`score` of trajectories verified in memory (verify_trajectories: the same checks and replay
    as verify_run, nothing written): the figures of part of a run that is still being written."""
    verify_trajectories(ws, trajs)
    return score(ws, trajs, k)


def evaluate(ws: Workspace, base_url: str | list[str], *, model: str = "smollm2-135m", k: int = 4,
             split: str = "heldout", max_scenarios: int | None = None, domains: list[str] | None = None,
             tau2: bool | list[str] = False, run_id: str | None = None, cfg: RolloutConfig | None = None, concurrency: int = 8,
             timeout: float = 120, agreement_sample: int = 5, scenario_ids: list[str] | None = None) -> dict[str, Any]:
    """Roll the model out k times on each scenario of `split` and report.

    tau2=True (or a list such as ["retail"]): tau2's airline/retail tasks instead, through our
    imported domains (built into the workspace on first use), scored as tau2 scores them;
    split "heldout" = tau2's test tasks. Then tau2's own evaluator re-scores a sample of the run's
    action sequences (up to `agreement_sample` trajectories and gold-action variants per domain)
    and the agreement rate goes into the report.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    if tau2:
        names = list(DOMAINS) if tau2 is True else list(tau2)
        for name in names:
            tau2_domain_dir(ws, name)
        domains = [f"tau2_{n}" for n in names]
    # Evaluation users never see the gold state: no goal check, whatever the caller passed. tau2 scores
    # its own way (no repetition rule): its conversations are never cut short as settled failures.
    cfg = (cfg or RolloutConfig()).model_copy(update={"goal_check": False})
    if tau2:
        cfg = cfg.model_copy(update={"stop_when_failed": False})
    t0 = time.perf_counter()
    rollout = run_rollouts(ws, base_url, model=model, trials=k, split=split, max_scenarios=max_scenarios,
                           domains=domains, cfg=cfg, run_id=run_id, concurrency=concurrency, timeout=timeout,
                           scenario_ids=scenario_ids)
    meta = {"model": model, "split": split, "suite": "tau2" if tau2 else "heldout", "user_goal_check": False,
            "rollout": {key: rollout.get(key) for key in ("planned", "written", "skipped_existing", "failed_domains",
                                                         "end_reasons", "wall_s", "sims_per_hour", "errors")}}
    report = evaluate_run(ws, rollout["run_id"], k, meta)
    if tau2 and agreement_sample:
        report["tau2_agreement"] = tau2_run_agreement(ws, rollout["run_id"], domains or [], agreement_sample)
    report["wall_s"] = round(time.perf_counter() - t0, 2)
    atomic_write_json(eval_path(ws, rollout["run_id"]), report)
    return report


def tau2_run_agreement(ws: Workspace, run_id: str, domains: list[str], sample: int, seed: int = 0) -> dict[str, Any]:
    """Agreement of our DB verdicts with tau2's EnvironmentEvaluator on a run's trajectories (+ gold variants)."""
    trajs = load_trajectories(ws, run_id)
    out: dict[str, Any] = {}
    for d in domains:
        mine = [t for t in trajs if t.domain == d]
        picked = random.Random(seed).sample(mine, min(sample, len(mine)))
        res = agreement(d.removeprefix("tau2_"), ws.domain_dir(d), load_scenarios(ws, d), sample=sample, seed=seed,
                        trajectories=picked)
        out[d] = {k: v for k, v in res.items() if k != "rows"}
    cases = sum(v["cases"] for v in out.values())
    agree = sum(v["agree"] for v in out.values())
    return {"domains": out, "cases": cases, "agree": agree, "agreement_rate": agree / cases if cases else None}
