"""Gold execution of a walk in the sandboxed environment: grounded arguments call by call, then a replay.

Tool code never runs here: every call goes through `envs.episode.Environment` (the sandbox).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from agentscaler.hashing import content_hash
from agentscaler.schemas import errors
from envs.spec import DomainSpec
from tasks.scenarios.arguments import StateView, coerce, ground_arguments, output_values
from tasks.scenarios.config import ScenarioParams
from tasks.scenarios.values import valid


class Dropped(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def _result(res: Any) -> tuple[bool, Any, str | None]:
    return bool(res.ok), res.content, res.error


class GoldEpisode:
    """An Environment and whether its state may differ from the seed.

    Every walk starts from the seed with tools.py run afresh and scratch emptied, in the sandbox
    child of the walk before (Environment.restart: no fork per walk, and no round trip of its own:
    it goes with the walk's first call), so neither the state nor tool code's module globals nor
    its files carry over from one walk to the next, also after a read-only walk. An environment
    without restart() is reset() when the state may differ from the seed: reads run in a
    transaction the runtime rolls back and failed calls leave no trace, so only after a successful
    write. Replays re-measure the final hash, so a tool that breaks this promise is caught there.
    """

    def __init__(self, env: Any):
        self.env, self.dirty = env, True
        self._restart = getattr(env, "restart", None)

    def fresh(self) -> None:
        if self._restart is not None:
            self._restart()
            self.dirty = False
        elif self.dirty:
            self.env.reset()
            self.dirty = False


def _episode(env: Any) -> GoldEpisode:
    return env if isinstance(env, GoldEpisode) else GoldEpisode(env)


def _chained(args: dict[str, Any], sources: dict[str, str], given: set[str]) -> bool:
    """Whether a call takes some value from an earlier output that the user has not given."""
    return any(sources.get(a) == "output" and json.dumps(v, sort_keys=True) not in given for a, v in args.items())


def _can_chain(tool: Any, outputs: list[Any], given: set[str]) -> bool:
    """Whether some draw of ground_arguments could make the call chained (_chained): a parameter for
    which the latest output holding its key (the one ground_arguments chains from) has a value that
    fits its schema and that the user has not given."""
    for name, sub in ((tool.parameters or {}).get("properties") or {}).items():
        sub = sub if isinstance(sub, dict) else {}
        for v in output_values(outputs, name):
            c = coerce(v, sub)
            if valid(c, sub) and json.dumps(c, sort_keys=True) not in given:
                return True
    return False


def execute_walk(env: Any, spec: DomainSpec, names: list[str], state: StateView, rng: random.Random,
                 params: ScenarioParams, seed_hash: str, seen_calls: set[str] | None = None
                 ) -> tuple[list[dict[str, Any]], str, Counter]:
    """Run a walk in a fresh episode, grounding each call on the outputs so far.

    Returns (calls, final_hash, counters); raises Dropped. A failing call is retried with new
    arguments (a failed call leaves the state unchanged); a read repeating an earlier call with
    no write in between is resampled (it would tell the agent nothing new). The final hash is
    the hash after the last write (the seed's for a read-only walk); `replay` re-measures it.
    `seen_calls` holds the call keys (`calls_key`) of kept scenarios: the last call's arguments
    are resampled rather than run when they would complete a duplicate. In a multi-call walk every
    later call must use something an earlier call returned that the user did not give (a found or
    created id): arguments that do not are resampled, and a walk that cannot chain is dropped
    ("unchained": two unrelated calls in a row teach little).
    """
    ep = _episode(env)
    env = ep.env
    ep.fresh()
    tools = {t.name: t for t in spec.tools}
    calls: list[dict[str, Any]] = []
    outputs: list[Any] = []
    cur_hash = seed_hash
    counts: Counter = Counter()
    since_write: set[str] = set()
    given: set[str] = set()  # the user's values so far (JSON)
    for i, name in enumerate(names):
        tool = tools[name]
        last = i == len(names) - 1
        if i and not _can_chain(tool, outputs, given):
            # every value an earlier output offers its parameters is one the user gave (or none is
            # offered): each try below would be resampled as unchained, so none is drawn
            raise Dropped("unchained", name)
        ok, last_error, tried, dup, unchained = False, "", 0, 0, 0
        for _ in range(params.arg_retries + (2 if i else 0)):
            args, sources = ground_arguments(tool, state, outputs, rng, params.optional_prob)
            if i and not _chained(args, sources, given):
                unchained += 1
                continue
            schema = tool.parameters or {"type": "object"}
            errs = [] if valid(args, schema) else errors(args, schema)  # the fast exact check first
            if errs:
                counts["invalid_arguments"] += 1
                last_error = "; ".join(errs)
                continue
            key = json.dumps([name, args], sort_keys=True)
            if tool.kind == "read" and key in since_write:
                counts["repeat_resampled"] += 1
                continue
            if last and seen_calls and calls_key(calls + [{"name": name, "arguments": args}]) in seen_calls:
                dup += 1
                continue
            tried += 1
            # a write's reply brings the state after it: its hash below needs no round trip
            ok, content, error = _result(env.call(name, args, snapshot=tool.kind == "write"))
            if ok:
                break
            counts["call_retried"] += 1
            last_error = error or "tool error"
        if not ok:
            if not tried and unchained:
                raise Dropped("unchained", name)
            if not tried and dup:
                raise Dropped("duplicate", name)
            if not tried and counts["invalid_arguments"]:
                raise Dropped("invalid_arguments", f"{name}: {last_error}"[:300])
            raise Dropped("call_failed", f"{name}: {last_error}"[:300])
        if tool.kind == "write":
            ep.dirty = True
            h = env.state_hash()
            if h == cur_hash:
                raise Dropped("noop_write", name)
            cur_hash = h
            since_write.clear()
        else:
            since_write.add(key)
        counts["chained_args"] += sum(v == "output" for v in sources.values())
        given |= {json.dumps(v, sort_keys=True) for a, v in args.items() if sources.get(a, "user") == "user"}
        calls.append({"name": name, "arguments": args, "output": content, "kind": tool.kind, "sources": sources})
        outputs.append(content)
    return calls, cur_hash, counts


def replay(env: Any, calls: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """Run gold calls in a fresh episode: (final hash, outputs). Raises Dropped on a failing call."""
    ep = _episode(env)
    env = ep.env
    ep.fresh()
    ep.dirty = any(c.get("kind", "write") == "write" for c in calls)
    pairs = [(c["name"], c["arguments"]) for c in calls]
    batch = getattr(env, "call_batch", None)  # one pipe round trip when the runtime offers it
    results = batch(pairs) if batch is not None else [env.call(n, a) for n, a in pairs]
    outs: list[Any] = []
    for (name, _), res in zip(pairs, results):
        ok, content, error = _result(res)
        if not ok:
            raise Dropped("nondeterministic", f"{name} failed on replay: {error}")
        outs.append(content)
    return env.state_hash(), outs


def replay_many(env: Any, walks: list[list[dict[str, Any]]]) -> list[tuple[str, list[Any], bytes] | Dropped]:
    """`replay` of many walks' gold calls in one round trip (Environment.replay: one sandbox child,
    each walk from the seed with tools.py run afresh, as the verifier replays trajectories), in a
    child that ran none of the walks: per walk (final hash, outputs, final image) or Dropped when a
    call failed. Needs an Environment (its replay); the determinism check of every kept scenario
    then costs one fork and one round trip per domain instead of one of each per scenario."""
    ep = _episode(env)
    env = ep.env
    env.reset()  # the walks ran in this child: the replays go in a fresh one (a fork)
    ep.dirty = True  # Environment.replay ends the episode: the next walk starts afresh
    oracle = env.state_oracle()
    out: list[tuple[str, list[Any], bytes] | Dropped] = []
    for calls, (results, image) in zip(walks, env.replay([[(c["name"], c["arguments"]) for c in calls] for calls in walks],
                                                         images=True)):
        bad = next(((c, r) for c, r in zip(calls, results) if not r.ok), None)
        if bad is not None:
            out.append(Dropped("nondeterministic", f"{bad[0]['name']} failed on replay: {bad[1].error}"))
            continue
        out.append((oracle.hash(image), [r.content for r in results], image))
    return out


def calls_key(calls: list[dict[str, Any]]) -> str:
    return content_hash([[c["name"], c["arguments"]] for c in calls])


def scenario_id(domain: str, calls: list[dict[str, Any]], gold_hash: str) -> str:
    return content_hash({"domain": domain, "gold_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls],
                         "gold_hash": gold_hash})
