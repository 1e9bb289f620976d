"""Verification: which trajectories are good training data, why the others are not, and whose fault.

Checks, each a reason code on the Verdict:
- malformed_dialogue: bad roles or order, a tool result without its call (or a call without its
  result), unparsable tool-call arguments, a malformed model reply, an empty turn;
- unknown_tool / invalid_arguments: a call names no tool of the domain / fails its JSON Schema;
- repetition: the same call (name + arguments) or the same assistant text `max_repeats` times;
- no_tool_calls: the scenario needs calls and the agent made none;
- turn_limit / fatal_error: the conversation did not end with the user's stop;
- state_mismatch: final state hash != gold hash (the field diff final vs gold goes on the Verdict);
- call_mismatch (read-only scenarios): the agent's successful calls differ from the gold calls;
  order matters only across writes (reads commute with reads); failed calls are allowed.

Attribution of a failure: `environment` (sandbox restarts, a sandbox or LLM-server failure),
`agent` when the agent's prompt outgrew its model's context window (so a short-context baseline is
scored on the same scenarios as a long-context one, not excused), `user` (the user simulator's LLM
failed; the agent asked, but the user never gave a fact the gold calls need and no tool output held it; the user
left empty turns; the user quit while the agent was still doing an announced action and no
stop refusal happened), else `agent` (a stop after the refusals were spent is the agent's: it
kept announcing without acting). Only passed trajectories become training data; user/environment failures are kept out
of pass^k (tasks.verify.passk).

Outputs under rollouts/<run-id>/: verified.jsonl (one verdict row per trajectory), verify.json
(funnel + pass^k), and trajectories.jsonl rewritten with the verdicts embedded (export reads
them there) — all atomic; the rewrite is skipped while a rollout holds the run lock.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler.artifacts import TRAJECTORIES, read_trajectories, scenario_map
from agentscaler.hashing import canonical_json
from agentscaler.models import Scenario, Trajectory, Verdict
from agentscaler.schemas import check
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_jsonl, atomic_write_text
from envs.spec import DomainSpec
from tasks.rollouts.conversation import pending_write
from tasks.verify.passk import passk_report

REASONS = ("malformed_dialogue", "unknown_tool", "invalid_arguments", "repetition", "no_tool_calls", "turn_limit",
           "fatal_error", "state_mismatch", "call_mismatch")
ROLES = ("system", "user", "assistant", "tool")
FUNNEL = [("well_formed", {"malformed_dialogue", "unknown_tool", "invalid_arguments"}),
          ("no_repetition", {"repetition"}), ("acted", {"no_tool_calls"}),
          ("completed", {"turn_limit", "fatal_error"}), ("outcome_ok", {"state_mismatch", "call_mismatch"})]


class DomainTools:
    """Compiled argument validators and tool kinds of one domain (built once per verify run)."""

    def __init__(self, spec: DomainSpec):
        self.kinds = {t.name: t.kind for t in spec.tools}
        # agentscaler.schemas: a malformed schema validates nothing, so every call of that tool is invalid
        self.checks = {t.name: check(t.parameters) for t in spec.tools}
        self._seen: dict[str, bool] = {}  # call_key -> valid (the same calls recur across trials)

    def valid(self, name: str, args: dict[str, Any], key: str | None = None) -> bool:
        key = key or call_key(name, args)
        ok = self._seen.get(key)
        if ok is None:
            c = self.checks.get(name)
            ok = self._seen[key] = c is not None and c.is_valid(args)
        return ok


def _norm(v: Any) -> Any:
    """Numbers compare by value (1 == 1.0) in call matching."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def call_key(name: str, args: dict[str, Any]) -> str:
    return canonical_json([name, _norm(args)])


def calls_match(agent: list[tuple[str, dict[str, Any]]], gold: list[tuple[str, dict[str, Any]]],
                kinds: dict[str, str]) -> bool:
    """Exact match of calls where only commuting calls may reorder: the sequences are cut at writes;
    writes must match in order, the reads between two writes as sets (a repeated read is harmless)."""
    def segments(calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        out: list[Any] = [set()]
        for name, args in calls:
            if kinds.get(name) == "write":
                out.append(call_key(name, args))
                out.append(set())
            else:
                out[-1].add(call_key(name, args))
        return out
    return segments(agent) == segments(gold)


def _args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            v = json.loads(raw)
        except ValueError:
            return None
        return v if isinstance(v, dict) else None
    return None


def state_diff(traj: Trajectory, scenario: Scenario) -> list[dict[str, Any]]:
    """Field diff final vs gold from the two seed diffs: [{table, key, column, expected, actual}]."""
    def index(diff: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {canonical_json([d.get("table"), d.get("key"), d.get("column")]): d for d in diff}
    gold, final = index(scenario.gold_diff), index(traj.final_diff)
    out = []
    for k in sorted(set(gold) | set(final)):
        g, f = gold.get(k), final.get(k)
        exp = g["after"] if g else (f or {}).get("before")
        act = f["after"] if f else (g or {}).get("before")
        if canonical_json(exp) != canonical_json(act):
            base = g or f or {}
            out.append({"table": base.get("table"), "key": base.get("key"), "column": base.get("column"),
                        "expected": exp, "actual": act})
    return out


def verify_trajectory(traj: Trajectory, scenario: Scenario, tools: DomainTools, max_repeats: int = 3) -> Verdict:
    """The Verdict of one trajectory against its scenario (reason codes in REASONS order)."""
    reasons: set[str] = set()
    msgs = traj.messages
    agent_calls: list[tuple[str, dict[str, Any]]] = []  # every call
    ok_calls: list[tuple[str, dict[str, Any]]] = []  # calls whose tool result was not an error
    pending: dict[str, tuple[str, dict[str, Any] | None]] = {}
    call_counts: Counter = Counter()
    text_counts: Counter = Counter()
    user_texts: list[str] = []
    tool_texts: list[str] = []
    if traj.tokens.get("n_format_errors", 0):
        reasons.add("malformed_dialogue")
    empty_user = False
    for i, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES or (role == "system" and i != 0):
            reasons.add("malformed_dialogue")
            continue
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            reasons.add("malformed_dialogue")
            content = str(content)
        if role != "tool" and pending:
            reasons.add("malformed_dialogue")  # a call left without its result
            pending.clear()
        if role == "system":
            continue
        if role == "user":
            if not (content or "").strip():
                reasons.add("malformed_dialogue")
                empty_user = True
            user_texts.append(content or "")
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls and not (content or "").strip():
                reasons.add("malformed_dialogue")
            if content and ("<tool_call>" in content or "</tool_call>" in content):
                reasons.add("malformed_dialogue")
            if content and content.strip() and not calls:
                text_counts[content.strip()] += 1
            for c in calls:
                fn = c.get("function") if isinstance(c, dict) else None
                name = fn.get("name") if isinstance(fn, dict) else None
                if not isinstance(name, str) or not name:
                    reasons.add("malformed_dialogue")
                    continue
                args = _args(fn.get("arguments"))
                key = call_key(name, args) if args is not None else ""
                if args is None:
                    reasons.add("malformed_dialogue")
                elif name not in tools.kinds:
                    reasons.add("unknown_tool")
                elif not tools.valid(name, args, key):
                    reasons.add("invalid_arguments")
                if args is not None:
                    agent_calls.append((name, args))
                    call_counts[key] += 1
                pending[str(c.get("id"))] = (name, args)
        else:  # tool
            tcid = str(m.get("tool_call_id"))
            if tcid not in pending:
                reasons.add("malformed_dialogue")
                continue
            name, args = pending.pop(tcid)
            tool_texts.append(content or "")
            if args is not None and not (content or "").startswith("Error:"):
                ok_calls.append((name, args))
    if pending:
        reasons.add("malformed_dialogue")
    first = next((m.get("role") for m in msgs if isinstance(m, dict) and m.get("role") != "system"), None)
    if first != "user":
        reasons.add("malformed_dialogue")
    if any(n >= max_repeats for n in call_counts.values()) or any(n >= max_repeats for n in text_counts.values()):
        reasons.add("repetition")
    if scenario.gold_calls and not agent_calls:
        reasons.add("no_tool_calls")
    if traj.end_reason == "turn_limit":
        reasons.add("turn_limit")
    elif traj.end_reason not in ("user_stop",):
        reasons.add("fatal_error")
    diff: list[dict[str, Any]] = []
    if traj.final_hash != scenario.gold_hash:
        reasons.add("state_mismatch")
        diff = state_diff(traj, scenario)
    if scenario.read_only:
        gold = [(c.name, c.arguments) for c in scenario.gold_calls]
        if not calls_match(ok_calls, gold, tools.kinds):
            reasons.add("call_mismatch")
    ordered = [r for r in REASONS if r in reasons]
    if not ordered:
        return Verdict(passed=True)
    return Verdict(passed=False, reasons=ordered, diff=diff,
                   attribution=attribute(traj, scenario, user_texts, tool_texts, empty_user))


# How OpenAI-compatible servers (vLLM, llama.cpp, our hf_server) say a prompt is over the context.
CONTEXT_OVERFLOW = ("context_length_exceeded", "maximum context length", "-token context")


def attribute(traj: Trajectory, scenario: Scenario, user_texts: list[str], tool_texts: list[str],
              empty_user: bool) -> str:
    """Whose failure: environment, user (simulator) or agent — from the evidence in the trajectory."""
    err = traj.error or ""
    if traj.end_reason == "fatal_error" and err.startswith("llm: "):
        if err.endswith("(user turn)"):
            return "user"  # the user simulator's LLM failed
        if err.endswith("(agent turn)") and any(s in err for s in CONTEXT_OVERFLOW):
            return "agent"  # the conversation outgrew the agent model's context window: its limit, scored
    if traj.end_reason == "fatal_error" or traj.tokens.get("n_sandbox_errors", 0) \
            or any("sandbox was restarted" in t for t in tool_texts):
        return "environment"
    if empty_user or not any(m.get("role") == "assistant" for m in traj.messages if isinstance(m, dict)):
        return "user"  # empty turns, or the user ended before the agent said anything
    said = " ".join(user_texts).lower()
    looked_up = " ".join(tool_texts).lower()  # a fact the agent found in a tool result was not needed from the user
    facts = {str(v).lower() for v in scenario.user_facts.values() if v is not None and not isinstance(v, (dict, list))}
    needed = {str(v).lower() for c in scenario.gold_calls for v in c.arguments.values()
              if not isinstance(v, (dict, list)) and str(v).lower() in facts}
    asked = any("?" in (m.get("content") or "") for m in traj.messages
                if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), str))
    if asked and any(v not in said and v not in looked_up for v in needed):
        return "user"  # the agent asked, the user never gave a fact the gold calls need, no tool output had it
    if traj.end_reason == "user_stop" and not traj.tokens.get("n_stop_refused", 0) \
            and len(traj.messages) >= 2 and pending_write(traj.messages[:-1]):
        return "user"  # quit while the agent was working, and no refusal stopped it (refusals off)
    return "agent"


# --- a run ------------------------------------------------------------------------------------------

def _run_locked(run_dir: Path) -> bool:
    lock = run_dir / "run.lock"
    if not lock.exists():
        return False
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def latest_run(ws: Workspace) -> str | None:
    runs = sorted((p.stat().st_mtime, p.parent.name) for p in (ws.root / "rollouts").glob(f"*/{TRAJECTORIES}"))
    return runs[-1][1] if runs else None


def verify_run(ws: Workspace, run_id: str | None = None, max_repeats: int = 3, embed: bool = True) -> dict[str, Any]:
    """Verify every trajectory of a run; write verified.jsonl, verify.json (and embed verdicts)."""
    run_id = run_id or latest_run(ws)
    if run_id is None:
        raise FileNotFoundError(f"no rollout runs under {ws.root / 'rollouts'}")
    run_dir = ws.rollout_dir(run_id)
    path = run_dir / TRAJECTORIES
    if not path.exists():
        raise FileNotFoundError(f"no trajectories for run {run_id} ({path})")
    t0 = time.perf_counter()
    trajs: list[Trajectory] = []
    unreadable: list[str] = []
    for where, traj, _, detail in read_trajectories(path):
        if traj is None:
            unreadable.append(f"{where}: {detail}"[:300])
        else:
            trajs.append(traj)
    t_read = time.perf_counter()
    report = verify_trajectories(ws, trajs, max_repeats=max_repeats)
    t_verify = time.perf_counter()
    rows = [{"trajectory_id": t.id, "scenario_id": t.scenario_id, "domain": t.domain, "trial": t.trial,
             "verdict": t.verdict.model_dump() if t.verdict else None} for t in trajs]
    atomic_write_jsonl(run_dir / "verified.jsonl", rows)
    embedded = False
    if embed and not _run_locked(run_dir):
        atomic_write_text(path, "".join(t.model_dump_json() + "\n" for t in trajs))
        embedded = True
    report.update(run_id=run_id, unreadable=len(unreadable), unreadable_examples=unreadable[:20],
                  embedded_in_trajectories=embedded,
                  seconds={"read": round(t_read - t0, 4), "verify": round(t_verify - t_read, 4),
                           "write": round(time.perf_counter() - t_verify, 4)})
    atomic_write_json(run_dir / "verify.json", report)
    return report


def verify_trajectories(ws: Workspace, trajs: list[Trajectory], max_repeats: int = 3) -> dict[str, Any]:
    """Set .verdict on each trajectory (in place); return the funnel, attribution and pass^k report."""
    scenarios = scenario_map(ws, {t.domain for t in trajs})
    tools: dict[str, DomainTools | None] = {}
    reasons: Counter = Counter()
    attribution: Counter = Counter()
    funnel = Counter()
    missing = 0
    results = []
    for t in trajs:
        sc = scenarios.get(t.scenario_id)
        if t.domain not in tools:
            try:
                tools[t.domain] = DomainTools(DomainSpec.load(ws.domain_dir(t.domain)))
            except (OSError, ValueError):
                tools[t.domain] = None
        dt = tools[t.domain]
        if sc is None or dt is None:
            missing += 1
            t.verdict = Verdict(passed=False, reasons=["unknown_scenario"], attribution="environment")
        else:
            t.verdict = verify_trajectory(t, sc, dt, max_repeats)
        v = t.verdict
        reasons.update(v.reasons)
        attribution[v.attribution] += 1
        failed_so_far = set(v.reasons)
        for stage, codes in FUNNEL:
            if failed_so_far & codes:
                break
            funnel[stage] += 1
        results.append({"scenario_id": t.scenario_id, "domain": t.domain, "passed": v.passed,
                        "attribution": v.attribution, "n_gold_calls": len(sc.gold_calls) if sc else 0})
    passed = sum(r["passed"] for r in results)
    by_origin = {o: {"trajectories": sum(t.origin == o for t in trajs),
                     "passed": sum(t.origin == o and t.verdict.passed for t in trajs)}
                 for o in sorted({t.origin for t in trajs})}  # agent experience vs gold replays, never mixed
    return {"trajectories": len(trajs), "passed": passed, "failed": len(trajs) - passed, "by_origin": by_origin,
            "pass_rate": round(passed / len(trajs), 6) if trajs else None,
            "reasons": {r: reasons.get(r, 0) for r in REASONS} | ({"unknown_scenario": missing} if missing else {}),
            "funnel": {"total": len(trajs), **{stage: funnel.get(stage, 0) for stage, _ in FUNNEL}},
            "attribution": {k: attribution.get(k, 0) for k in ("none", "agent", "user", "environment")},
            "pass^k": passk_report(results), "pass^k_raw": passk_report(results, agent_only=False)}
