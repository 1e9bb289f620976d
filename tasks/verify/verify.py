"""Verification: which trajectories are good training data, why the others are not, and whose fault.

Nothing a trajectory records is taken on its word where it can be checked: every trajectory's
calls are replayed from the seed in its domain's sandbox (tasks.verify.replay), and the replay's
results and final state are what is judged; the recorded tool messages and state hash are only
compared with them.

Checks, each a reason code on the Verdict:
- malformed_dialogue: bad roles or order, a tool result without its call (or a call without its
  result), unparsable tool-call arguments, a malformed model reply, an empty turn;
- unknown_tool / invalid_arguments: a call names no tool of the domain / fails its JSON Schema;
- output_mismatch: a tool message differs from what its call returns on replay, after the one
  encoding a rollout shows results with (envs.episode.ToolResult.text(): the JSON text, or
  "Error: ..."), so a call shown as failed must fail on replay and one shown as done must succeed;
- recorded_state_mismatch: the trajectory records a final state hash other than the replayed one;
- repetition: the same call (name + arguments) or the same assistant text `max_repeats` times;
- no_tool_calls: the scenario needs calls and the agent made none;
- turn_limit / fatal_error: the conversation did not end with the user's stop;
- state_mismatch: the replayed final state's hash != gold hash (the field diff replayed vs gold goes
  on the Verdict);
- call_mismatch (read-only scenarios): the calls that succeeded on replay differ from the gold
  calls; order matters only across writes (reads commute with reads); failed calls are allowed;
- replay_failed: the domain's environment could not replay (its files or its sandbox);
  unknown_scenario (reported apart): the trajectory names no scenario of the workspace.

Attribution of a failure: `environment` (sandbox restarts, a sandbox or LLM-server failure, tool
code that answered differently on two replays or ran out of time on one side of a mismatch, a
replay that could not run), `agent` when the agent's prompt outgrew its model's context window (so a short-context baseline is
scored on the same scenarios as a long-context one, not excused), `user` (the user simulator's LLM
failed; the agent asked, but the user never gave a fact the gold calls need and no tool output held it; the user
left empty turns; the user quit while the agent was still doing an announced action and no
stop refusal happened), else `agent` (a stop after the refusals were spent is the agent's: it
kept announcing without acting). Only passed trajectories become training data; user/environment failures are kept out
of pass^k (tasks.verify.passk).

Outputs under rollouts/<run-id>/: verified.jsonl (one verdict row per trajectory), verify.json
(funnel + pass^k + replay counts), and trajectories.jsonl rewritten with the verdicts embedded
(export reads them there) — all atomic; the rewrite is skipped while a rollout holds the run lock.
"""

from __future__ import annotations

import fcntl
import gc
import json
import mmap
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentscaler.artifacts import TRAJECTORIES, domain_scenarios, read_trajectory_rows
from agentscaler.hashing import call_key, canonical_json
from agentscaler.models import Scenario, Trajectory, Verdict
from agentscaler.schemas import Check, check, value_problem
from agentscaler.workspace import (StagedWrite, Workspace, atomic_write_json, atomic_write_start,
                                  jsonl_line)
from envs.episode import Checked
from envs.fastcheck import flat_checker
from envs.spec import DomainSpec
from tasks.rollouts.conversation import MAX_REPEATS, pending_write
from tasks.verify.passk import passk_report
from tasks.verify.replay import DomainReplay, Replayed, Replayer

REASONS = ("malformed_dialogue", "unknown_tool", "invalid_arguments", "output_mismatch", "recorded_state_mismatch",
           "repetition", "no_tool_calls", "turn_limit", "fatal_error", "state_mismatch", "call_mismatch",
           "replay_failed")
ROLES = ("system", "user", "assistant", "tool")
FUNNEL = [("replayed", {"unknown_scenario", "replay_failed"}),
          ("well_formed", {"malformed_dialogue", "unknown_tool", "invalid_arguments"}),
          ("faithful", {"output_mismatch", "recorded_state_mismatch"}),
          ("no_repetition", {"repetition"}), ("acted", {"no_tool_calls"}),
          ("completed", {"turn_limit", "fatal_error"}), ("outcome_ok", {"state_mismatch", "call_mismatch"})]
REPLAY_THREADS = 4  # domains replayed at once: while threads wait for their sandbox children, one works
# (on the shared 2-core machine 4 took a third less time than 2; 8 no less than 4)
# A tool message that says the environment, not the call, failed (see attribute).
ENVIRONMENT_ERRORS = ("sandbox was restarted", "exceeded its time limit")


class DomainTools:
    """Compiled argument validators and tool kinds of one domain (built once per verify run)."""

    def __init__(self, spec: DomainSpec):
        self.kinds = {t.name: t.kind for t in spec.tools}
        self._parameters = {t.name: t.parameters for t in spec.tools}
        # a tool's validators, compiled when a call first names it (trajectories call about half
        # of a domain's tools): its Check and, for a flat schema, envs.fastcheck's checker
        self._checks: dict[str, tuple[Check, Callable[[Any], bool] | None]] = {}
        self._seen: dict[str, bool] = {}  # call_key -> valid (the same calls recur across trials)
        self._gold: dict[str, list[Any]] = {}  # scenario id -> segments of its gold calls

    def gold_segments(self, scenario: Scenario) -> list[Any]:
        seg = self._gold.get(scenario.id)
        if seg is None:
            seg = self._gold[scenario.id] = segments([(c.name, call_key(c.name, c.arguments))
                                                      for c in scenario.gold_calls], self.kinds)
        return seg

    def valid(self, name: str, args: dict[str, Any], key: str | None = None) -> bool:
        key = key or call_key(name, args)
        ok = self._seen.get(key)
        if ok is None:
            compiled = self._compiled(name)
            # value_problem first, as the episode checks (envs.episode.Environment._check): the flat
            # check alone would pass a NaN or an infinity
            ok = self._seen[key] = compiled is not None and value_problem(args) is None \
                and ((compiled[1] is not None and compiled[1](args)) or compiled[0].is_valid(args))
        return ok

    def _compiled(self, name: str) -> tuple[Check, Callable[[Any], bool] | None] | None:
        """The tool's validators (None: no such tool). agentscaler.schemas: a malformed schema
        validates nothing, so every call of that tool is invalid; for a flat schema, envs.fastcheck's
        yes agrees with jsonschema (which still decides every no)."""
        got = self._checks.get(name)
        if got is None and name in self._parameters:
            c = check(self._parameters[name])
            got = self._checks[name] = (c, flat_checker(c.schema) if c.problem is None else None)
        return got


def calls_match(agent: list[tuple[str, dict[str, Any]]], gold: list[tuple[str, dict[str, Any]]],
                kinds: dict[str, str]) -> bool:
    """Exact match of calls where only commuting calls may reorder: the sequences are cut at writes;
    writes must match in order, the reads between two writes as sets (a repeated read is harmless)."""
    return segments([(n, call_key(n, a)) for n, a in agent], kinds) == \
        segments([(n, call_key(n, a)) for n, a in gold], kinds)


def segments(keyed: list[tuple[str, str]], kinds: dict[str, str]) -> list[Any]:
    """calls_match's form of a call sequence ((name, call_key) pairs): each write, and the set of
    reads between two writes."""
    out: list[Any] = [set()]
    for name, key in keyed:
        if kinds.get(name) == "write":
            out.append(key)
            out.append(set())
        else:
            out[-1].add(key)
    return out


def _args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            v = json.loads(raw)  # not orjson: it reads an integer past 64 bits as a float
        except ValueError:
            return None
        return v if isinstance(v, dict) else None
    return None


def state_diff(final_diff: list[dict[str, Any]], gold_diff: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Field diff final vs gold from the two seed diffs: [{table, key, column, expected, actual}]."""
    def index(diff: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {canonical_json([d.get("table"), d.get("key"), d.get("column")]): d for d in diff}
    gold, final = index(gold_diff), index(final_diff)
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


@dataclass
class Dialogue:
    """What the static checks read from a trajectory: their reason codes, and every call to replay
    (in order) with the tool message the dialogue shows for it."""

    reasons: set[str]
    calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, arguments: the object, else as given)
    keys: list[str | None] = field(default_factory=list)  # call_key of each call (None: arguments not an object)
    shown: list[str | None] = field(default_factory=list)  # the tool message of each call (None: none)
    user_texts: list[str] = field(default_factory=list)
    tool_texts: list[str] = field(default_factory=list)
    empty_user: bool = False


def has_call_markers(content: str | None) -> bool:
    """Tool-call markers left in an assistant's text: a reply the parser could not read (malformed)."""
    return bool(content) and ("<tool_call>" in content or "</tool_call>" in content)


def check_dialogue(traj: Trajectory, scenario: Scenario, tools: DomainTools,
                   max_repeats: int = MAX_REPEATS) -> Dialogue:
    """The static checks: everything that needs no replay (form, schemas, repetition, the end)."""
    d = Dialogue(reasons=set())
    reasons = d.reasons
    msgs = traj.messages
    pending: dict[str, int] = {}  # tool_call_id -> index of its call in d.calls
    call_counts: Counter = Counter()
    text_counts: Counter = Counter()
    if traj.tokens.get("n_format_errors", 0):
        reasons.add("malformed_dialogue")
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
                d.empty_user = True
            d.user_texts.append(content or "")
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                reasons.add("malformed_dialogue")
                calls = []
            if not calls and not (content or "").strip():
                reasons.add("malformed_dialogue")
            if has_call_markers(content):
                reasons.add("malformed_dialogue")
            if content and content.strip() and not calls:
                text_counts[content.strip()] += 1
            for c in calls:
                fn = c.get("function") if isinstance(c, dict) else None
                name = fn.get("name") if isinstance(fn, dict) else None
                if not isinstance(name, str) or not name:
                    reasons.add("malformed_dialogue")
                    continue
                raw = fn.get("arguments")
                args = _args(raw)
                key = None
                call: tuple[str, Any] = (name, raw if args is None else args)
                if args is None:
                    reasons.add("malformed_dialogue")
                else:
                    key = call_key(name, args)
                    call_counts[key] += 1
                    if name not in tools.kinds:
                        reasons.add("unknown_tool")
                    elif not tools.valid(name, args, key):
                        reasons.add("invalid_arguments")
                    else:
                        call = Checked(call)  # the replay does not check these arguments again
                cid = str(c.get("id"))
                if cid in pending:
                    reasons.add("malformed_dialogue")  # two calls of one turn share an id
                pending[cid] = len(d.calls)
                d.calls.append(call)
                d.keys.append(key)
                d.shown.append(None)
        else:  # tool
            tcid = str(m.get("tool_call_id"))
            if tcid not in pending:
                reasons.add("malformed_dialogue")
                continue
            d.shown[pending.pop(tcid)] = content or ""
            d.tool_texts.append(content or "")
    if pending:
        reasons.add("malformed_dialogue")
    first = next((m.get("role") for m in msgs if isinstance(m, dict) and m.get("role") != "system"), None)
    if first != "user":
        reasons.add("malformed_dialogue")
    if any(n >= max_repeats for n in call_counts.values()) or any(n >= max_repeats for n in text_counts.values()):
        reasons.add("repetition")
    if scenario.gold_calls and not any(k is not None for k in d.keys):
        reasons.add("no_tool_calls")
    if traj.end_reason == "turn_limit":
        reasons.add("turn_limit")
    elif traj.end_reason == "settled_failure":  # the engine stopped it as failed (conversation.settled_failure)
        if not reasons & {"repetition", "malformed_dialogue"}:
            reasons.add("fatal_error")  # ... but nothing here fails it: a conversation cut short
    elif traj.end_reason not in ("user_stop",):
        reasons.add("fatal_error")
    return d


def disagrees(traj: Trajectory, d: Dialogue, replay: Replayed) -> bool:
    """The record differs from the replay: a tool message, or a recorded final state."""
    return (bool(traj.final_hash) and traj.final_hash != replay.state_hash) or \
        any(s is not None and s != t for s, t in zip(d.shown, replay.texts))


def judge(traj: Trajectory, scenario: Scenario, tools: DomainTools, d: Dialogue,
          replay: Replayed | None) -> Verdict:
    """The Verdict from the static checks and the replay (None: it could not run); reason codes
    in REASONS order."""
    reasons = set(d.reasons)
    diff: list[dict[str, Any]] = []
    unstable = False
    if replay is None:
        reasons.add("replay_failed")
        unstable = True
    else:
        unstable = replay.unstable
        for shown, text in zip(d.shown, replay.texts):
            if shown is not None and shown != text:
                reasons.add("output_mismatch")
                unstable = unstable or any(e in shown or e in text for e in ENVIRONMENT_ERRORS)
        if traj.final_hash and traj.final_hash != replay.state_hash:
            reasons.add("recorded_state_mismatch")
        if replay.state_hash != scenario.gold_hash:
            reasons.add("state_mismatch")
            diff = state_diff(replay.diff or [], scenario.gold_diff)
        if scenario.read_only:
            ok_calls = [(c[0], k) for c, k, r in zip(d.calls, d.keys, replay.results) if k is not None and r.ok]
            if segments(ok_calls, tools.kinds) != tools.gold_segments(scenario):
                reasons.add("call_mismatch")
    ordered = [r for r in REASONS if r in reasons]
    if not ordered:
        return Verdict(passed=True)
    return Verdict(passed=False, reasons=ordered, diff=diff,
                   attribution=attribute(traj, scenario, d.user_texts, d.tool_texts, d.empty_user, unstable))


def verify_trajectory(traj: Trajectory, scenario: Scenario, tools: DomainTools, replay: Replayed | None,
                      max_repeats: int = MAX_REPEATS) -> Verdict:
    """The Verdict of one trajectory against its scenario, given its replay (tasks.verify.replay)."""
    return judge(traj, scenario, tools, check_dialogue(traj, scenario, tools, max_repeats), replay)


# How OpenAI-compatible servers (vLLM, llama.cpp, our hf_server) say a prompt is over the context.
CONTEXT_OVERFLOW = ("context_length_exceeded", "maximum context length", "-token context")


def attribute(traj: Trajectory, scenario: Scenario, user_texts: list[str], tool_texts: list[str],
              empty_user: bool, unstable: bool = False) -> str:
    """Whose failure: environment, user (simulator) or agent — from the evidence in the trajectory
    and its replay (unstable: the environment answered differently, or could not replay)."""
    err = traj.error or ""
    if traj.end_reason == "fatal_error" and err.startswith("llm: "):
        if err.endswith("(user turn)"):
            return "user"  # the user simulator's LLM failed
        if err.endswith("(agent turn)") and any(s in err for s in CONTEXT_OVERFLOW):
            return "agent"  # the conversation outgrew the agent model's context window: its limit, scored
    if traj.end_reason == "fatal_error" or traj.tokens.get("n_sandbox_errors", 0) or unstable \
            or any("sandbox was restarted" in t for t in tool_texts):
        return "environment"
    if traj.end_reason == "settled_failure":
        return "agent"  # it repeated itself or replied malformed: what followed cannot excuse it
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


@dataclass
class Part:
    """One verifier's share of a run's lines, verified (verify_part): what verify_run merges and
    writes. Plain data, so another process (tasks.verify.shards) can send it back."""

    lines: list[int] = field(default_factory=list)  # the line number of each readable line
    rows: list[bytes] = field(default_factory=list)  # its verified.jsonl line (encoded where verified)
    # the line with its verdict: whole, or (cut, length, tail): the first `cut` of the `length`
    # bytes the line had as read, then tail (what crosses from a shard process is the verdicts)
    out: list[bytes | tuple[int, int, bytes]] = field(default_factory=list)
    judged: list[tuple[list[str], str, bool, str]] = field(default_factory=list)  # see summarize
    results: list[tuple[tuple, dict[str, Any]]] = field(default_factory=list)  # (order key, pass^k row)
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    failed_domains: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def verify_part(ws: Workspace, path: Path, max_repeats: int = MAX_REPEATS, replayer: Replayer | None = None,
                take: Callable[[bytes], bool] | None = None) -> Part:
    """Read, check, replay and judge the lines of a trajectories file (those `take` accepts: all
    by default), and encode what verify_run writes for them."""
    # Reading, checking and writing make millions of short-lived objects, which reference counting
    # frees; the cyclic collector would walk the whole heap again and again meanwhile (2-3x the time).
    collecting = gc.isenabled()
    gc.disable()
    part = Part()
    c0 = time.process_time()
    try:
        t0 = time.perf_counter()
        trajs: list[Trajectory] = []
        raws: list[tuple[bytes | None, int]] = []  # each line as read (the verdict alone is encoded again)
        for where, traj, _, detail, raw, members in read_trajectory_rows(path, share_tools=True, take=take):
            lineno = int(where.rsplit(":", 1)[1])
            if traj is None:
                part.unreadable.append((lineno, f"{where}: {detail}"[:300]))
            else:
                trajs.append(traj)
                raws.append((raw, members))
                part.lines.append(lineno)
        t_read = time.perf_counter()
        part.counts, part.failed_domains, results, replay_s = _verify_all(ws, trajs, max_repeats, replayer,
                                                                          REPLAY_THREADS)
        t_verify = time.perf_counter()
        part.results = [((k, d, part.lines[i]), r) for (k, d, i), r in results]
        part.judged = [_judged(t) for t in trajs]
        verdicts = [t.verdict.model_dump() if t.verdict else None for t in trajs]  # dumped once, used twice
        part.rows = [jsonl_line({"trajectory_id": t.id, "scenario_id": t.scenario_id, "domain": t.domain,
                                 "trial": t.trial, "verdict": v}) for t, v in zip(trajs, verdicts)]
        part.out = [_verdict_out(t, raw, v, members) for t, (raw, members), v in zip(trajs, raws, verdicts)]
        # Freed here, by reference counting, while the collector is still off: enabled with them
        # alive, its first young collection would walk every object the run made (a quarter of
        # the verifier's time on 3,000 real trajectories).
        del trajs, raws
    finally:
        if collecting:
            gc.enable()
    part.seconds = {"read": t_read - t0, "verify": t_verify - t_read, "encode": time.perf_counter() - t_verify,
                    "replay": replay_s, "cpu": time.process_time() - c0}
    return part


def verify_run(ws: Workspace, run_id: str | None = None, max_repeats: int = MAX_REPEATS, embed: bool = True,
               replayer: Replayer | None = None, shards: Any = None) -> dict[str, Any]:
    """Verify every trajectory of a run; write verified.jsonl, verify.json (and embed verdicts).
    `shards` (tasks.verify.shards.Shards): its processes verify the lines, each its domains,
    and the parts are merged here in line order: the same files as verified in this process."""
    # Merging, summarizing and encoding make as many short-lived objects as verify_part (which see);
    # the cyclic collector stays off until they are freed, with _verify_run's frame.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _verify_run(ws, run_id, max_repeats, embed, replayer, shards)
    finally:
        if collecting:
            gc.enable()


def _verify_run(ws: Workspace, run_id: str | None, max_repeats: int, embed: bool, replayer: Replayer | None,
                shards: Any) -> dict[str, Any]:
    run_id = run_id or latest_run(ws)
    if run_id is None:
        raise FileNotFoundError(f"no rollout runs under {ws.root / 'rollouts'}")
    run_dir = ws.rollout_dir(run_id)
    path = run_dir / TRAJECTORIES
    if not path.exists():
        raise FileNotFoundError(f"no trajectories for run {run_id} ({path})")
    parts = shards.verify(path, max_repeats) if shards is not None else [verify_part(ws, path, max_repeats, replayer)]
    t_write = time.perf_counter()
    order = sorted((ln, p, j) for p, part in enumerate(parts) for j, ln in enumerate(part.lines))
    counts: Counter = Counter()
    failed: dict[str, str] = {}
    for part in parts:
        counts.update(part.counts)
        failed.update(part.failed_domains)
    results = sorted((x for part in parts for x in part.results), key=lambda x: x[0])
    # The trajectories' rewrite and verified.jsonl are written here, then made durable and put in
    # place by other threads while the report is made: an fsync waits on the disk and needs no
    # interpreter lock. (Written by such a thread too, each writev call waited for the lock while
    # this one computed: 50-90 ms instead of 10 for a 35 MB file.)
    staged: list[StagedWrite] = []
    done: list[Future] = []
    with ThreadPoolExecutor(2, thread_name_prefix="verify-finish") as finishing:
        try:
            rewrite = _embed(path, [(ln, parts[p].out[j]) for ln, p, j in order]) \
                if embed and not _run_locked(run_dir) else None
            if rewrite is not None:
                staged.append(rewrite)
            staged.append(atomic_write_start(run_dir / "verified.jsonl", [parts[p].rows[j] for _, p, j in order]))
            done = [finishing.submit(s.finish) for s in staged]
            report = summarize([parts[p].judged[j] for _, p, j in order], [r for _, r in results], counts,
                               dict(sorted(failed.items())), max(part.seconds["replay"] for part in parts))
            for d in done:
                d.result()
        finally:
            for s in staged[len(done):]:  # never went to a finishing thread
                s.abandon()
    embedded = rewrite is not None
    unreadable = [text for _, text in sorted(x for part in parts for x in part.unreadable)]
    report.update(run_id=run_id, unreadable=len(unreadable), unreadable_examples=unreadable[:20],
                  embedded_in_trajectories=embedded,
                  seconds={"read": round(max(p.seconds["read"] for p in parts), 4),
                           "verify": round(max(p.seconds["verify"] + p.seconds["encode"] for p in parts), 4),
                           "write": round(time.perf_counter() - t_write, 4)})
    atomic_write_json(run_dir / "verify.json", report)
    return report


# How our writers put the verdict: the object's last member.
VERDICT_KEY = b',"verdict":'


def _embed(path: Path, outs: list[tuple[int, bytes | tuple[int, int, bytes]]]) -> StagedWrite | None:
    """The trajectories file at `path` rewritten with the verdicts embedded (_embedded), in a
    temporary file that finish() puts in its place; None when its lines changed since they were
    read (verified.jsonl has the verdicts)."""
    # mapped, not read: the lines go from the page cache to the new file without a copy here. Not
    # closed by hand: the mapping goes with its last slice (a failed write's traceback holds some)
    with open(path, "rb") as fh:
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(fh.fileno()).st_size else b""
    chunks = _embedded(data, outs)
    return None if chunks is None else atomic_write_start(path, chunks)


def _embedded(data: bytes | mmap.mmap, outs: list[tuple[int, bytes | tuple[int, int, bytes]]]) -> list[Any] | None:
    """The trajectories file `data` rewritten as chunks (slices of it, and the new bytes): the
    verified lines (line number, _verdict_out's value; in line order) with their verdicts, the other
    lines left out, as before. None when a line is not the one that was read (its length, or the
    verdict key at the cut): the file changed in between."""
    view = memoryview(data)
    chunks: list[Any] = []
    pos, lineno, key = 0, 1, len(VERDICT_KEY)
    for ln, out in outs:
        while lineno < ln:
            nl = data.find(b"\n", pos)
            if nl < 0:
                return None
            pos, lineno = nl + 1, lineno + 1
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        if isinstance(out, tuple):
            cut, length, tail = out
            if end - pos != length or view[pos + cut:pos + cut + key] != VERDICT_KEY:
                return None
            chunks += (view[pos:pos + cut], tail)
        else:
            chunks.append(out)
        pos, lineno = end, lineno + 1
    return chunks


def _verdict_out(traj: Trajectory, line: bytes | None, verdict: Any = ..., members: int = 0
                 ) -> bytes | tuple[int, int, bytes]:
    """The trajectory's line with its verdict (`verdict`: its model_dump(), when the caller has it),
    as (cut, length, tail) where the verdict is put into the line (below), else the whole line.

    A line (read by orjson: valid JSON) that names "verdict" once from `members` on (where the
    reader found that the top-level members before it name none of those after it:
    read_trajectory_rows' last value; 0, the whole line), as `,"verdict":` followed by bytes that
    parse as one JSON value up to the line's closing `}`, gets the new verdict in that value's
    place: the rest kept byte for byte. Sound: a `"` after a `,` is not escaped, so it starts a
    string, the key `"verdict"`; its value parses alone only if nothing but the object's closing
    brace follows it, and the line's last `}` closes the top-level object, so the key is the
    object's own, its last member and (named once from `members` on, where it is) its only
    verdict. Our writers' lines end so (`"verdict":null}` before verification, the old verdict
    after). Any other line read by orjson is parsed again (by json: orjson reads an integer over
    64 bits as a float) and dumped with the verdict replaced; a line orjson refused, the model
    dumped."""
    if verdict is ...:
        verdict = traj.verdict.model_dump() if traj.verdict else None
    if line is not None:
        end = len(line)
        while end and line[end - 1] in b" \t\n\r\x0b\x0c":  # line.rstrip(), without a copy of the line
            end -= 1
        try:
            at = line.rfind(VERDICT_KEY, 0, end)
            # (counted from `members` on: a line's tools list is 70% of it)
            if at >= members and line.endswith(b"}", 0, end) and line.count(b'"verdict"', members, end) == 1:
                try:
                    orjson.loads(line[at + len(VERDICT_KEY):end - 1])
                except orjson.JSONDecodeError:
                    pass
                else:
                    return at, len(line), VERDICT_KEY + orjson.dumps(verdict) + b"}\n"
            return json.dumps({**json.loads(line), "verdict": verdict}, ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode() + b"\n"
        except (TypeError, ValueError, orjson.JSONEncodeError):
            pass  # a value of the verdict's diff json will not encode: the model's own encoder
    return traj.model_dump_json().encode("utf-8") + b"\n"


def replay_domain(trajs: list[Trajectory], scenarios: list[Scenario], dialogues: list[Dialogue], rp: Any,
                  counts: Counter) -> list[Replayed]:
    """Replay one domain's trajectories (one sandbox child, many per round trip); those whose record
    disagrees are replayed again alone in a fresh child, and that replay decides (tasks.verify.replay)."""
    want = [s.gold_hash for s in scenarios]
    replays = rp.replay([d.calls for d in dialogues], want)
    again = [i for i, (t, d, r) in enumerate(zip(trajs, dialogues, replays)) if disagrees(t, d, r)]
    if again:
        fresh = rp.replay([dialogues[i].calls for i in again], [want[i] for i in again], fresh=True)
        for i, f in zip(again, fresh):
            f.unstable = f.texts != replays[i].texts or f.state_hash != replays[i].state_hash
            replays[i] = f
        counts["replayed_fresh"] += len(again)
        counts["unstable"] += sum(f.unstable for f in fresh)
    counts["replayed"] += len(replays)
    return replays


def _verify_domain(ws: Workspace, rep: Replayer, domain: str, trajs: list[Trajectory], max_repeats: int
                   ) -> tuple[Counter, str | None, list[dict[str, Any]]]:
    """Check, replay and judge one domain's trajectories (verdicts set in place): (replay counts,
    why the domain could not replay, one pass^k row per trajectory)."""
    counts: Counter = Counter()
    failed = None
    scenarios = {s.id: s for s in domain_scenarios(ws.domain_dir(domain), {t.scenario_id for t in trajs})}
    rp = rep.domain(domain) if scenarios else "the domain has no scenarios"
    try:
        tools: DomainTools | None = DomainTools(rp.env.spec if isinstance(rp, DomainReplay)
                                                else DomainSpec.load(ws.domain_dir(domain)))
    except (OSError, ValueError):
        tools = None
    items = []
    for t in trajs:
        sc = scenarios.get(t.scenario_id)
        if sc is None or tools is None:
            t.verdict = Verdict(passed=False, reasons=["unknown_scenario"], attribution="environment")
        else:
            items.append((t, sc, check_dialogue(t, sc, tools, max_repeats)))
    items.sort(key=lambda i: i[0].scenario_id)  # a scenario's trials one after another (see tasks.verify.replay)
    replays: list[Replayed | None] = [None] * len(items)
    if items:
        if isinstance(rp, str):
            failed = rp
        else:
            try:
                replays = list(replay_domain([i[0] for i in items], [i[1] for i in items], [i[2] for i in items],
                                             rp, counts))
            except Exception as exc:  # noqa: BLE001 - the sandbox failed: this domain's trajectories, not the run
                failed = f"{type(exc).__name__}: {exc}"[:300]
    for (t, sc, d), r in zip(items, replays):
        t.verdict = judge(t, sc, tools, d, r)  # type: ignore[arg-type]
    rows = [{"scenario_id": t.scenario_id, "domain": t.domain, "passed": t.verdict.passed,
             "attribution": t.verdict.attribution, "n_gold_calls": len(scenarios[t.scenario_id].gold_calls)
             if t.scenario_id in scenarios else 0} for t in trajs]
    return counts, failed, rows


def verify_trajectories(ws: Workspace, trajs: list[Trajectory], max_repeats: int = MAX_REPEATS,
                        replayer: Replayer | None = None, threads: int = REPLAY_THREADS) -> dict[str, Any]:
    """Set .verdict on each trajectory (in place); return the funnel, attribution, pass^k and
    replay report. `replayer` keeps domains' sandbox workers open across calls (default: opened
    here, closed at the end; either way started ahead of use). Domains are checked, replayed and
    judged `threads` at a time (while some wait for their sandbox children, one works)."""
    counts, failed_domains, results, seconds = _verify_all(ws, trajs, max_repeats, replayer, threads)
    return summarize([_judged(t) for t in trajs], [r for _, r in results], counts, failed_domains, seconds)


def _judged(t: Trajectory) -> tuple[list[str], str, bool, str]:
    """What the report counts of one verified trajectory: (reasons, attribution, passed, origin)."""
    return t.verdict.reasons, t.verdict.attribution, t.verdict.passed, t.origin  # type: ignore[union-attr]


def _verify_all(ws: Workspace, trajs: list[Trajectory], max_repeats: int, replayer: Replayer | None,
                threads: int) -> tuple[Counter, dict[str, str], list[tuple[tuple, dict[str, Any]]], float]:
    """verify_trajectories' work: (replay counts, failed domains, pass^k rows each with its sort
    key (known domain?, domain, position in trajs): unknown domains first, then by domain, each in
    the given order), seconds)."""
    own = replayer is None
    rep = replayer or Replayer(ws.root / "domains")
    known = set(ws.domain_ids())
    by_domain: dict[str, list[Trajectory]] = {}
    at: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        if t.domain in known:
            by_domain.setdefault(t.domain, []).append(t)
            at.setdefault(t.domain, []).append(i)
        else:
            t.verdict = Verdict(passed=False, reasons=["unknown_scenario"], attribution="environment")
    counts: Counter = Counter()
    failed_domains: dict[str, str] = {}
    results = [((0, "", i), {"scenario_id": t.scenario_id, "domain": t.domain, "passed": False,
                             "attribution": "environment", "n_gold_calls": 0})
               for i, t in enumerate(trajs) if t.domain not in known]
    t0 = time.perf_counter()
    try:
        # the largest domains first, so that no large one is left to run alone at the end
        domains = sorted(by_domain, key=lambda d: (-len(by_domain[d]), d))
        rep.prefetch(domains)  # their sandbox workers start in the background, in this order
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            done = (pool.map if threads > 1 and len(domains) > 1 else map)(
                lambda d: _verify_domain(ws, rep, d, by_domain[d], max_repeats), domains)
            for domain, (c, failed, rows) in zip(domains, done):
                counts.update(c)
                results.extend(((1, domain, i), r) for i, r in zip(at[domain], rows))
                if failed is not None:
                    failed_domains[domain] = failed
    finally:
        if own:
            rep.close()
    results.sort(key=lambda x: x[0])  # unknown domains first, then by domain, each in the given order
    return counts, failed_domains, results, time.perf_counter() - t0


def summarize(judged: list[tuple[list[str], str, bool, str]], results: list[dict[str, Any]], counts: Counter,
              failed_domains: dict[str, str], seconds: float) -> dict[str, Any]:
    """The report of verified trajectories: judged = (reasons, attribution, passed, origin) of each,
    results = their pass^k rows (in _verify_all's order)."""
    reasons: Counter = Counter()
    attribution: Counter = Counter()
    funnel = Counter()
    missing = 0
    # counted per distinct (reasons, attribution): thousands of trajectories share a few
    for (why, blame), k in Counter((tuple(j[0]), j[1]) for j in judged).items():
        missing += k * ("unknown_scenario" in why)
        for r in why:
            reasons[r] += k
        attribution[blame] += k
        failed_so_far = set(why)
        for stage, codes in FUNNEL:
            if failed_so_far & codes:
                break
            funnel[stage] += k
    n = len(judged)
    passed = sum(r["passed"] for r in results)
    origins = Counter((j[3], bool(j[2])) for j in judged)
    by_origin = {o: {"trajectories": origins[o, True] + origins[o, False], "passed": origins[o, True]}
                 for o in sorted({o for o, _ in origins})}  # agent experience vs gold replays, never mixed
    return {"trajectories": n, "passed": passed, "failed": n - passed, "by_origin": by_origin,
            "pass_rate": round(passed / n, 6) if n else None,
            "reasons": {r: reasons.get(r, 0) for r in REASONS} | ({"unknown_scenario": missing} if missing else {}),
            "funnel": {"total": n, **{stage: funnel.get(stage, 0) for stage, _ in FUNNEL}},
            "attribution": {k: attribution.get(k, 0) for k in ("none", "agent", "user", "environment")},
            "pass^k": passk_report(results), "pass^k_raw": passk_report(results, agent_only=False),
            "replay": {"trajectories": counts["replayed"], "replayed_fresh": counts["replayed_fresh"],
                       "unstable": counts["unstable"], "failed_domains": failed_domains,
                       "seconds": round(seconds, 4)}}
