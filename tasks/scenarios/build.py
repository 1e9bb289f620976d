"""Scenarios: directed random walks on a domain's tool graph, grounded arguments, gold execution.

Per domain (paper, step 5): sample a tool sequence by a directed random walk along the
dependency edges (DomainSpec.edges) from a random start tool until a target length or a tool
with no outgoing edge; give every call grounded arguments; run the sequence in a fresh
episode of the sandboxed environment; keep the gold calls, their outputs, the gold final-state
hash and the field diff from the seed. Walks whose calls fail, whose writes change nothing, or
that repeat an existing scenario are dropped and counted by reason. Every kept scenario is
replayed once more and kept only if it reaches the same hash and outputs (determinism).

Arguments, in order of preference (see `ground_arguments`):
  1. chaining: a value under the same key in an earlier call's output of the same walk (the
     dependency edge is why the walk went there, so the data flows along it; the agent must
     look the value up, the user need not know it);
  2. the episode's database state: existing values of a column named like the parameter
     (ids, names, dates), or a word of a name/title column for search-like strings (for a
     write, a non-key value with a format or enum comes from the schema half the time: a new
     email rather than someone else's);
  3. the parameter's JSON Schema (enum, const, format, type, range).
Values are coerced to the schema type and the final arguments are validated with jsonschema.

Tool code never runs here: every call goes through `envs.episode.Environment` (the sandbox).
The seed database is only *read* here (sqlite3, read-only) to ground argument values.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentscaler.hashing import content_hash
from agentscaler.models import GoldCall, Scenario
from agentscaler.schemas import errors, is_valid
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_jsonl, file_lock, read_jsonl
from envs.spec import DomainSpec, ToolSpec
from tasks.scenarios.intents import IntentWriter, write_intent

STAGE = "scenarios"
SCENARIOS_FILE = "scenarios.jsonl"
META_FILE = "scenarios.meta.json"  # sidecar: params + environment hash of the finished file (written last)
DROP_REASONS = ("call_failed", "noop_write", "read_changed_state", "duplicate", "nondeterministic",
                "invalid_arguments", "intent_missing_fact", "empty_walk")


class ScenarioParams(BaseModel):
    """Everything that decides which scenarios a domain gets (their hash names the output)."""

    model_config = ConfigDict(extra="forbid")

    per_domain: int = Field(20, ge=0)
    max_length: int = Field(4, ge=1, le=32)
    seed: int = 0
    read_share: float = Field(0.4, ge=0.0, le=1.0)  # target share of read-only scenarios
    length_weights: list[float] | None = None  # weights of target lengths 1..max_length (default uniform)
    optional_prob: float = Field(0.3, ge=0.0, le=1.0)  # chance to fill an optional parameter
    attempts_factor: int = Field(10, ge=1)  # at most per_domain * attempts_factor walks
    arg_retries: int = Field(3, ge=1)  # fresh arguments for a failing call before the walk is dropped
    verify_replay: bool = True
    heldout_fraction: float = Field(0.2, ge=0.0, le=1.0)
    tau2_heldout: bool = True

    def key(self) -> str:
        return content_hash(self.model_dump())


# --- split ----------------------------------------------------------------------------------

def is_tau2(domain_id: str, spec: DomainSpec | None = None) -> bool:
    return domain_id.startswith("tau2") or (spec is not None and spec.synthesizer == "tau2")


def domain_split(domain_id: str, heldout_fraction: float = 0.2, tau2_heldout: bool = True,
                 spec: DomainSpec | None = None) -> str:
    """'train' or 'heldout', stable across runs: a hash of the domain id, not a random draw."""
    if tau2_heldout and is_tau2(domain_id, spec):
        return "heldout"
    u = int(hashlib.sha256(f"split:{domain_id}".encode()).hexdigest()[:12], 16) / 16**12
    return "heldout" if u < heldout_fraction else "train"


# --- walks ----------------------------------------------------------------------------------

def adjacency(spec: DomainSpec) -> dict[str, list[tuple[str, float]]]:
    names = {t.name for t in spec.tools}
    adj: dict[str, list[tuple[str, float]]] = {n: [] for n in sorted(names)}
    for e in spec.edges:
        if e.src in names and e.dst in names and e.src != e.dst:
            adj[e.src].append((e.dst, max(float(e.weight), 1e-6)))
    return adj


def random_walk(adj: dict[str, list[tuple[str, float]]], start: str, length: int,
                allowed: set[str], rng: random.Random) -> list[str]:
    """Follow outgoing edges (weighted) from start; stop at `length` or a tool with no allowed successor."""
    path = [start]
    while len(path) < length:
        nxt = [(d, w) for d, w in adj.get(path[-1], ()) if d in allowed]
        if not nxt:
            break
        path.append(rng.choices([d for d, _ in nxt], weights=[w for _, w in nxt])[0])
    return path


def plan_walk(spec: DomainSpec, adj: dict[str, list[tuple[str, float]]], rng: random.Random,
              target_len: int, want_write: bool, tries: int = 8) -> list[str]:
    """A walk of the wanted kind and length: read-only walks stay on read tools; write walks hold a write.

    Walks that stop early at a dead end are retried from other starts; the best one found is
    returned (right kind first, then closest length).
    """
    kinds = {t.name: t.kind for t in spec.tools}
    reads = {n for n, k in kinds.items() if k == "read"}
    allowed = set(kinds) if want_write else reads
    if not allowed:
        return []
    starts = sorted(allowed)
    if want_write and target_len == 1:
        starts = sorted(n for n in allowed if kinds[n] == "write") or starts
    best: list[str] = []
    best_score = (-1, -1)
    for _ in range(tries):
        path = random_walk(adj, rng.choice(starts), target_len, allowed, rng)
        has_write = any(kinds[n] == "write" for n in path)
        score = (int(has_write == want_write), -abs(target_len - len(path)))
        if score > best_score:
            best, best_score = path, score
        if score == (1, 0):
            break
    return best


# --- grounding ------------------------------------------------------------------------------

_SEARCH_WORDS = ("query", "search", "keyword", "name", "title", "term", "text")
_NAME_COLUMNS = ("name", "title", "label")
_WORDS = ("alpha", "blue", "river", "summit", "orchid", "delta", "maple", "nova")


class StateView:
    """Column values of the seed database, read-only, to ground arguments in existing data."""

    def __init__(self, spec: DomainSpec, seed_path: Path, max_values: int = 500):
        self.columns: dict[str, list[tuple[bool, list[Any]]]] = {}  # column -> [(is_pk, values)]
        self.keys: set[str] = {c for t in spec.tables for c in t.primary_key} | \
            {c.name for t in spec.tables for c in t.columns if c.foreign_key}
        self.name_words: dict[str, list[str]] = {}  # table -> words of its name/title columns
        self._memo: dict[tuple[str, str, str], list[Any]] = {}
        self.nested: dict[str, list[Any]] = {}  # key inside json column values -> values
        conn = sqlite3.connect(f"file:{Path(seed_path).resolve()}?mode=ro", uri=True)
        try:
            for t in spec.tables:
                for c in t.columns:
                    try:
                        rows = conn.execute(f'SELECT DISTINCT "{c.name}" FROM "{t.name}" WHERE "{c.name}" IS NOT NULL '
                                            f'ORDER BY 1 LIMIT {int(max_values)}').fetchall()
                    except sqlite3.Error:
                        continue
                    values = [r[0] for r in rows]
                    if c.type == "json":
                        values = [_json_or(v) for v in values]
                        for v in values:  # keys inside JSON values (an address's city, zip) ground too
                            found: dict[str, list[Any]] = {}
                            _nested(v, found, 0)
                            for k, vs in found.items():
                                bucket = self.nested.setdefault(k, [])
                                bucket.extend(x for x in vs if len(bucket) < max_values and x not in bucket)
                    if c.type == "boolean":
                        values = [bool(v) for v in values]
                    if values:
                        self.columns.setdefault(c.name, []).append((c.name in t.primary_key, values))
                    if c.type == "text" and any(c.name == n or c.name.endswith("_" + n) for n in _NAME_COLUMNS):
                        words = self.name_words.setdefault(t.name, [])
                        words.extend(w for v in values for w in str(v).split() if len(w) > 2)
        finally:
            conn.close()
        self.name_words = {t: sorted(set(w)) for t, w in self.name_words.items()}

    def grounded(self, tool: ToolSpec, param: str, schema: dict[str, Any]) -> list[Any]:
        """Schema-valid database values for a parameter (memoized: the seed does not change)."""
        key = (tool.name, param, json.dumps(schema, sort_keys=True))
        hit = self._memo.get(key)
        if hit is None:
            hit = [c for c in (coerce(v, schema) for v in self.values_for(param)) if is_valid(c, schema)]
            if not hit and "string" in _types(schema) and not schema.get("enum") and not schema.get("format") \
                    and any(w in param.lower() for w in _SEARCH_WORDS):
                hit = [w for w in self.words_for(tool) if is_valid(w, schema)]
            self._memo[key] = hit
        return hit

    def words_for(self, tool: ToolSpec) -> list[str]:
        """Words of name/title columns of the tables the tool talks about (all tables if none is named)."""
        text = f"{tool.name} {tool.description}".lower()
        hits = [t for t in self.name_words if t.lower().rstrip("s") in text]
        return sorted({w for t in (hits or list(self.name_words)) for w in self.name_words[t]})

    def values_for(self, param: str) -> list[Any]:
        """Values of the column named like the parameter; a table where it is the key comes first."""
        entries = self.columns.get(param, [])
        entries = sorted(entries, key=lambda e: not e[0])
        return entries[0][1] if entries else sorted(self.nested.get(param, []), key=repr)


def _json_or(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _nested(obj: Any, found: dict[str, list[Any]], depth: int) -> None:
    if depth > 3:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (str, int, float, bool)):
                found.setdefault(k, []).append(v)
            else:
                _nested(v, found, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:20]:
            _nested(v, found, depth + 1)


def output_values(outputs: list[Any], key: str) -> list[Any]:
    """Scalar values under `key` in the most recent output that has any (dicts, lists of dicts, nested)."""
    for out in reversed(outputs):
        found: list[Any] = []
        _collect(out, key, found, 0)
        if found:
            seen: list[Any] = []
            for v in found:
                if v not in seen:
                    seen.append(v)
            return seen
    return []


def _collect(obj: Any, key: str, found: list[Any], depth: int) -> None:
    if depth > 4:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, (str, int, float, bool)):
                found.append(v)
            elif isinstance(v, (dict, list)):
                _collect(v, key, found, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:50]:
            _collect(v, key, found, depth + 1)


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, list):
        return [x for x in t if x != "null"] or ["null"]
    if t:
        return [t]
    if "enum" in schema or "const" in schema:
        return []
    return ["string"]


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """Make a grounded value fit the schema type when that is lossless (id 7 -> "7", "3" -> 3)."""
    types = _types(schema)
    if not types or isinstance(value, bool) and "boolean" in types:
        return value
    t = types[0]
    try:
        if t == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if t == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        if t == "integer" and isinstance(value, float) and value.is_integer():
            return int(value)
        if t == "number" and isinstance(value, str):
            return float(value)
    except ValueError:
        return value
    return value


def sample_from_schema(schema: dict[str, Any], rng: random.Random, clock: str = "2024-05-15T15:00:00",
                       depth: int = 0) -> Any:
    """A value that satisfies a (simple) JSON Schema: enum, const, format, type and range."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for alt in ("anyOf", "oneOf"):
        if schema.get(alt):
            return sample_from_schema(rng.choice(schema[alt]), rng, clock, depth + 1)
    if "default" in schema and rng.random() < 0.5:
        return schema["default"]
    t = _types(schema)[0] if _types(schema) else "string"
    if t == "boolean":
        return rng.random() < 0.5
    if t in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum", 0 if t == "integer" else 0.0))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", lo + (10 if t == "integer" else 100)))
        if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
            lo = lo + (1 if t == "integer" else 0.01)
        if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
            hi = hi - (1 if t == "integer" else 0.01)
        if t == "integer":
            lo, hi = int(lo), int(hi)
            return rng.randint(min(lo, hi), max(lo, hi))
        return round(rng.uniform(min(lo, hi), max(lo, hi)), 2)
    if t == "array":
        n = max(int(schema.get("minItems", 1)), 1)
        n = min(n, int(schema.get("maxItems", n)))
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {"type": "string"}
        out = [sample_from_schema(items, rng, clock, depth + 1) for _ in range(n)]
        return out
    if t == "object":
        props = schema.get("properties", {}) if depth < 4 else {}
        req = schema.get("required", [])
        return {k: sample_from_schema(props.get(k, {"type": "string"}), rng, clock, depth + 1) for k in req}
    if t == "null":
        return None
    fmt = schema.get("format")
    day = dt.datetime.fromisoformat(clock) + dt.timedelta(days=rng.randint(1, 30))
    if fmt == "email":
        return f"{rng.choice(_WORDS)}{rng.randint(1, 99)}@example.com"
    if fmt == "date":
        return day.date().isoformat()
    if fmt == "date-time":
        return day.isoformat() + "Z"
    if fmt == "time":
        return f"{rng.randint(8, 18):02d}:{rng.choice((0, 15, 30, 45)):02d}:00"
    if fmt in ("uri", "url"):
        return f"https://example.com/{rng.choice(_WORDS)}"
    if fmt == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    word = f"{rng.choice(_WORDS)}"
    lo, hi = int(schema.get("minLength", 0)), int(schema.get("maxLength", 64))
    while len(word) < lo:
        word += rng.choice(_WORDS)
    return word[: max(hi, 1)]


def ground_arguments(tool: ToolSpec, state: StateView, outputs: list[Any], rng: random.Random,
                     optional_prob: float = 0.3, clock: str = "2024-05-15T15:00:00"
                     ) -> tuple[dict[str, Any], dict[str, str]]:
    """(arguments, sources): each value from an earlier output, the database state, or the schema.

    `sources[arg]` is "output" (chained: the agent looks it up) or "user" (the user must say it;
    from the database state or the schema).
    """
    schema = tool.parameters or {}
    props: dict[str, Any] = schema.get("properties", {}) or {}
    required = set(schema.get("required", []) or [])
    args: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in sorted(props):
        ps = props[name] if isinstance(props[name], dict) else {}
        if name not in required and rng.random() >= optional_prob:
            continue
        chained = [c for c in (coerce(v, ps) for v in output_values(outputs, name)) if is_valid(c, ps)]
        if chained:
            args[name], sources[name] = rng.choice(chained), "output"
            continue
        from_db = state.grounded(tool, name, ps)
        if tool.kind == "write" and name not in state.keys and (ps.get("format") or ps.get("enum")) \
                and rng.random() < 0.5:
            from_db = []  # a new value to set (an email, a status): from the schema half the time
        if from_db:
            args[name], sources[name] = rng.choice(from_db), "user"
            continue
        args[name], sources[name] = sample_from_schema(ps, rng, clock), "user"
    return args, sources


# --- gold execution -------------------------------------------------------------------------

class Dropped(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def _result(res: Any) -> tuple[bool, Any, str | None]:
    return bool(res.ok), res.content, res.error


class GoldEpisode:
    """An Environment and whether its state may differ from the seed.

    Reads run in a transaction the runtime rolls back, and failed calls leave no trace, so the
    state is dirty only after a successful write: a reset is sent only then (fewer round trips
    to the sandbox worker). Replays re-measure the final hash, so a tool that breaks this
    promise is caught there, not trusted.
    """

    def __init__(self, env: Any):
        self.env, self.dirty = env, True

    def fresh(self) -> None:
        if self.dirty:
            self.env.reset()
            self.dirty = False


def _episode(env: Any) -> GoldEpisode:
    return env if isinstance(env, GoldEpisode) else GoldEpisode(env)


def execute_walk(env: Any, spec: DomainSpec, names: list[str], state: StateView, rng: random.Random,
                 params: ScenarioParams, seed_hash: str, seen_calls: set[str] | None = None
                 ) -> tuple[list[dict[str, Any]], str, Counter]:
    """Run a walk in a fresh episode, grounding each call on the outputs so far.

    Returns (calls, final_hash, counters); raises Dropped. A failing call is retried with new
    arguments (a failed call leaves the state unchanged); a read repeating an earlier call with
    no write in between is resampled (it would tell the agent nothing new). The final hash is
    the hash after the last write (the seed's for a read-only walk); `replay` re-measures it.
    `seen_calls` holds the call keys (`calls_key`) of kept scenarios: the last call's arguments
    are resampled rather than run when they would complete a duplicate.
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
    for i, name in enumerate(names):
        tool = tools[name]
        last = i == len(names) - 1
        ok, last_error, tried, dup = False, "", 0, 0
        for _ in range(params.arg_retries):
            args, sources = ground_arguments(tool, state, outputs, rng, params.optional_prob, spec.clock)
            errs = errors(args, tool.parameters or {"type": "object"})
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
            ok, content, error = _result(env.call(name, args))
            if ok:
                break
            counts["call_retried"] += 1
            last_error = error or "tool error"
        if not ok:
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


def calls_key(calls: list[dict[str, Any]]) -> str:
    return content_hash([[c["name"], c["arguments"]] for c in calls])


def scenario_id(domain: str, calls: list[dict[str, Any]], gold_hash: str) -> str:
    return content_hash({"domain": domain, "gold_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls],
                         "gold_hash": gold_hash})


# --- one domain -----------------------------------------------------------------------------

def environment_hash(domain_dir: Path) -> str:
    """Hash of what decides the scenarios besides the params: spec, tool code, seed database, hash rules."""
    from envs.state import HASH_VERSION

    h = hashlib.sha256(f"state-hash-v{HASH_VERSION}".encode())
    for name in ("spec.json", "tools.py", "seed.sqlite"):
        p = Path(domain_dir) / name
        h.update(name.encode())
        h.update(p.read_bytes() if p.exists() else b"")
    return h.hexdigest()[:16]


def _resolve(ws_or_domain_dir: Workspace | Path | str, domain_id: str) -> tuple[Path, Workspace | None]:
    if isinstance(ws_or_domain_dir, Workspace):
        return ws_or_domain_dir.domain_dir(domain_id), ws_or_domain_dir
    p = Path(ws_or_domain_dir)
    if (p / "spec.json").exists():
        return p, None
    ws = Workspace(p)
    return ws.domain_dir(domain_id), ws


def generate(env: Any, spec: DomainSpec, domain_dir: Path, domain_id: str, params: ScenarioParams,
             intent_writer: IntentWriter | None = None) -> tuple[list[Scenario], dict[str, Any]]:
    """The scenarios of one domain on an open Environment (reset between walks), and the counts."""
    rng = random.Random(content_hash([domain_id, params.seed]))
    state = StateView(spec, domain_dir / spec.seed_path)
    adj = adjacency(spec)
    kinds = Counter(t.kind for t in spec.tools)
    split = domain_split(domain_id, params.heldout_fraction, params.tau2_heldout, spec)
    weights = params.length_weights or [1.0] * params.max_length
    weights = (list(weights) + [0.0] * params.max_length)[: params.max_length]
    want_reads = round(params.per_domain * params.read_share) if kinds["write"] else params.per_domain
    if not kinds["read"]:
        want_reads = 0
    ep = GoldEpisode(env)
    ep.fresh()
    seed_hash = env.state_hash()
    kept: list[Scenario] = []
    seen: set[str] = set()
    seen_calls: set[str] = set()
    dropped: Counter = Counter()
    counters: Counter = Counter()
    attempts = 0
    n_reads = 0
    while len(kept) < params.per_domain and attempts < params.per_domain * params.attempts_factor:
        attempts += 1
        n_writes = len(kept) - n_reads
        if n_reads >= want_reads:
            want_write = True
        elif n_writes >= params.per_domain - want_reads:
            want_write = False
        else:
            want_write = rng.random() >= params.read_share
        target = rng.choices(range(1, params.max_length + 1), weights=weights)[0]
        names = plan_walk(spec, adj, rng, target, want_write)
        if not names:
            dropped["empty_walk"] += 1
            continue
        try:
            calls, final_hash, c = execute_walk(ep, spec, names, state, rng, params, seed_hash, seen_calls)
            read_only = all(x["kind"] == "read" for x in calls)
            if not read_only and final_hash == seed_hash:
                raise Dropped("noop_write", "final state equals the seed")
            # same calls => same final state (deterministic tools), so the calls alone name a duplicate
            sid = scenario_id(domain_id, calls, final_hash)
            if sid in seen:
                raise Dropped("duplicate")
            if params.verify_replay:
                h2, outs2 = replay(ep, calls)
                if read_only and h2 != seed_hash:
                    raise Dropped("read_changed_state")
                if h2 != final_hash or json.dumps(outs2, sort_keys=True, default=str) != \
                        json.dumps([x["output"] for x in calls], sort_keys=True, default=str):
                    raise Dropped("nondeterministic", "replay reached another state or output")
            elif env.state_hash() != final_hash:
                raise Dropped("read_changed_state" if read_only else "nondeterministic")
            diff = [] if read_only else env.diff()
            intent, facts, missing = write_intent(spec, calls, intent_writer)
            if missing:
                raise Dropped("intent_missing_fact", ", ".join(missing))
        except Dropped as d:
            dropped[d.reason] += 1
            continue
        seen.add(sid)
        seen_calls.add(calls_key(calls))
        counters.update(c)
        n_reads += read_only
        kept.append(Scenario(
            id=sid, domain=domain_id, read_only=read_only, intent=intent, user_facts=facts,
            gold_calls=[GoldCall(name=x["name"], arguments=x["arguments"], output=x["output"], kind=x["kind"]) for x in calls],
            gold_hash=final_hash, seed_hash=seed_hash, gold_diff=list(diff or []), split=split, seed=params.seed))
    report = {
        "domain": domain_id, "split": split, "kept": len(kept), "attempts": attempts,
        "dropped": dict(sorted(dropped.items())), "counters": dict(sorted(counters.items())),
        "read_only": sum(s.read_only for s in kept), "write": sum(not s.read_only for s in kept),
        "lengths": dict(sorted(Counter(len(s.gold_calls) for s in kept).items())),
    }
    return kept, report


def build_scenarios(ws_or_domain_dir: Workspace | Path | str, domain_id: str, per_domain: int = 20,
                    max_length: int = 4, seed: int = 0, *, env: Any = None, force: bool = False,
                    unsafe: bool = False, intent_writer: IntentWriter | None = None,
                    **options: Any) -> dict[str, Any]:
    """Build and write domains/<id>/scenarios.jsonl; returns the report (see `_build_scenarios`).

    Holds the domain's lock (domains/<id>/.lock), so two runs on one workspace build it once."""
    domain_dir, _ = _resolve(ws_or_domain_dir, domain_id)
    with file_lock(domain_dir / ".lock"):
        return _build_scenarios(ws_or_domain_dir, domain_id, per_domain, max_length, seed, env=env, force=force,
                                unsafe=unsafe, intent_writer=intent_writer, **options)


def _build_scenarios(ws_or_domain_dir: Workspace | Path | str, domain_id: str, per_domain: int = 20,
                     max_length: int = 4, seed: int = 0, *, env: Any = None, force: bool = False,
                     unsafe: bool = False, intent_writer: IntentWriter | None = None,
                     **options: Any) -> dict[str, Any]:
    """Build and write domains/<id>/scenarios.jsonl; returns the report.

    Skips (report["skipped"] = True) when the file exists for the same params and environment.
    `env` may be an open Environment of this domain (reused, not closed); otherwise one is
    opened and closed here. Extra options are ScenarioParams fields (read_share, heldout_fraction...).
    """
    params = ScenarioParams(per_domain=per_domain, max_length=max_length, seed=seed, **options)
    domain_dir, ws = _resolve(ws_or_domain_dir, domain_id)
    spec = DomainSpec.load(domain_dir)
    out_path, meta_path = domain_dir / SCENARIOS_FILE, domain_dir / META_FILE
    env_hash = environment_hash(domain_dir)
    catalog = None
    if ws is not None:
        from agentscaler.catalog import Catalog

        catalog = Catalog(ws.catalog_path)
    if not force and out_path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text("utf-8"))
        if meta.get("params_hash") == params.key() and meta.get("env_hash") == env_hash \
                and meta.get("file_hash") == _file_hash(out_path):
            return {**meta.get("report", {}), "skipped": True, "path": str(out_path)}
    if catalog is not None:
        catalog.mark(domain_id, STAGE, "running")
    t0 = time.perf_counter()
    own_env = env is None
    try:
        if own_env:
            from envs.episode import Environment

            env = Environment.open(domain_dir, unsafe=unsafe)
        try:
            scenarios, report = generate(env, spec, domain_dir, domain_id, params, intent_writer)
        finally:
            if own_env:
                env.close()
        atomic_write_jsonl(out_path, [s.model_dump(mode="json") for s in scenarios])
        report.update(seconds=round(time.perf_counter() - t0, 4), skipped=False, path=str(out_path))
        fh = _file_hash(out_path)
        atomic_write_json(meta_path, {"params": params.model_dump(), "params_hash": params.key(),
                                      "env_hash": env_hash, "file_hash": fh, "report": report})
    except Exception as exc:
        if catalog is not None:
            catalog.mark(domain_id, STAGE, "failed", error=f"{type(exc).__name__}: {exc}")
        raise
    if catalog is not None:
        catalog.mark(domain_id, STAGE, "done", artifact=fh)
    return report


def _file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


scenarios_domain = build_scenarios  # the ARCHITECTURE.md name: <stage>_domain(ws, domain_id, ...)


def build_all(ws: Workspace, domain_ids: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Every finished domain in turn; one failing domain is recorded and never stops the rest."""
    reports: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for d in domain_ids if domain_ids is not None else ws.domain_ids():
        try:
            reports.append(build_scenarios(ws, d, **kwargs))
        except Exception as exc:  # noqa: BLE001 - recorded in the catalog by build_scenarios
            failed[d] = f"{type(exc).__name__}: {exc}"[:500]
    dropped: Counter = Counter()
    for r in reports:
        dropped.update(r.get("dropped", {}))
    return {"domains": len(reports), "failed": failed, "skipped": sum(bool(r.get("skipped")) for r in reports),
            "scenarios": sum(r.get("kept", 0) for r in reports),
            "read_only": sum(r.get("read_only", 0) for r in reports), "write": sum(r.get("write", 0) for r in reports),
            "dropped": dict(sorted(dropped.items())), "reports": reports}


def load_scenarios(ws: Workspace, domain_id: str | None = None) -> list[Scenario]:
    """Scenarios on disk (one domain or all), for `show scenarios` and later stages."""
    ids = [domain_id] if domain_id else ws.domain_ids()
    out: list[Scenario] = []
    for d in ids:
        p = ws.domain_dir(d) / SCENARIOS_FILE
        if p.exists():
            out.extend(Scenario.model_validate(r) for r in read_jsonl(p))
    return out


# --- Prefect ----------------------------------------------------------------------------------

def _task_fn(ws_root: str, domain_id: str, per_domain: int = 20, max_length: int = 4, seed: int = 0,
             **options: Any) -> dict[str, Any]:
    return build_scenarios(Workspace(ws_root), domain_id, per_domain, max_length, seed, **options)


def _make_task() -> Callable[..., Any]:
    from prefect import task

    from agentscaler.errors import transient_only

    return task(name="scenarios", retries=2, retry_delay_seconds=1, retry_condition_fn=transient_only,
                tags=["scenarios"])(_task_fn)


def __getattr__(name: str) -> Any:
    """`scenarios_task` (one Prefect task run = one domain) is built on first use: importing
    Prefect takes seconds, and the plain functions, the CLI and the tests do not need it."""
    if name == "scenarios_task":
        globals()["scenarios_task"] = t = _make_task()
        return t
    raise AttributeError(name)
