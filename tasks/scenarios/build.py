"""Scenarios: directed random walks on a domain's tool graph, grounded arguments, gold execution.

Per domain (paper, step 5): sample a tool sequence by a directed random walk along the
dependency edges (DomainSpec.edges) from a random start tool until a target length or a tool
with no outgoing edge (the mix: `single_share` one-call scenarios, the rest walk data-flow edges
first, so later calls use what earlier ones found or created); give every call grounded arguments; run the sequence from
the seed in the sandboxed environment (each walk in a restarted episode: a new connection holding
the seed, tools.py run afresh, scratch emptied; execute.GoldEpisode); keep the gold calls, their outputs, the gold final-state
hash and the field diff from the seed. Walks whose calls fail, whose writes change nothing, or
that repeat an existing scenario are dropped and counted by reason. Every kept scenario is
replayed once more and kept only if it reaches the same hash and outputs (determinism): all of a
domain's in one round trip, in a sandbox child that ran none of the walks, each from the seed with
tools.py run afresh (execute.replay_many; the verifier's replay), failures refilled by more walks. The
report carries the scenarios' quality (tasks.scenarios.quality: kinds, chain share, non-empty
gold reads).

Arguments come from tasks.scenarios.arguments (the one sampler: earlier outputs of the walk,
then the database state, then the schema; values checked against each tool's JSON Schema).

Tool code never runs here: every call goes through `envs.episode.Environment` (the sandbox).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler import progress
from agentscaler.artifacts import SCENARIOS
from agentscaler.catalog import Catalog
from agentscaler.errors import error_text, tag_stage
from agentscaler.hashing import content_hash
from agentscaler.models import GoldCall, Scenario
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_jsonl, file_lock
from envs.episode import Environment, write_state_oracle
from envs.spec import DomainSpec
from envs.state import HASH_VERSION
from tasks.scenarios.arguments import StateView
from tasks.scenarios.config import ScenarioParams
from tasks.scenarios.execute import Dropped, GoldEpisode, calls_key, execute_walk, replay, replay_many, scenario_id
from tasks.scenarios.intents import IntentWriter, configured_writer, write_intent
from tasks.scenarios.quality import scenario_quality
from tasks.scenarios.walks import adjacency, dataflow, plan_walk

STAGE = "scenarios"
META_FILE = "scenarios.meta.json"  # sidecar: params + environment hash of the finished file (written last)
DROP_REASONS = ("call_failed", "noop_write", "read_changed_state", "duplicate", "nondeterministic",
                "invalid_arguments", "intent_missing_fact", "empty_walk", "unchained")


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


# --- one domain -----------------------------------------------------------------------------

def environment_hash(domain_dir: Path) -> str:
    """Hash of what decides the scenarios besides the params: spec, tool code, seed database, hash rules."""
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
    multi = list(range(2, params.max_length + 1))
    weights = list(params.length_weights or [1.0] * len(multi))
    weights = (weights + [0.0] * len(multi))[: len(multi)]
    if multi and not any(weights):
        weights = [1.0] * len(multi)
    flow = dataflow(spec)
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
    # With verify_replay, walks that pass wait here (counted as kept while the walk goes on) until
    # enough are found; then all are replayed in one round trip (execute.replay_many) and those
    # that fail are dropped and replaced by further walks. Without a drop, the walks, the random
    # draws and so the scenarios are those of replaying each walk as soon as it is found.
    pending: list[tuple[str, list[dict[str, Any]], str, bool, Counter]] = []
    batched = params.verify_replay and callable(getattr(env, "replay", None))

    def drop(reason: str, sid: str, calls: list[dict[str, Any]], read_only: bool) -> None:
        nonlocal n_reads
        dropped[reason] += 1
        seen.discard(sid)
        seen_calls.discard(calls_key(calls))
        n_reads -= read_only

    def keep(sid: str, calls: list[dict[str, Any]], final_hash: str, read_only: bool, c: Counter,
             diff: list[dict[str, Any]]) -> None:
        intent, facts, missing = write_intent(spec, calls, intent_writer)
        if missing:
            raise Dropped("intent_missing_fact", ", ".join(missing))
        counters.update(c)
        kept.append(Scenario(
            id=sid, domain=domain_id, read_only=read_only, intent=intent, user_facts=facts,
            gold_calls=[GoldCall(name=x["name"], arguments=x["arguments"], output=x["output"], kind=x["kind"]) for x in calls],
            gold_hash=final_hash, seed_hash=seed_hash, gold_diff=list(diff or []), split=split, seed=params.seed))

    while True:
        while len(kept) + len(pending) < params.per_domain and attempts < params.per_domain * params.attempts_factor:
            attempts += 1
            n_writes = len(kept) + len(pending) - n_reads
            if n_reads >= want_reads:
                want_write = True
            elif n_writes >= params.per_domain - want_reads:
                want_write = False
            else:
                want_write = rng.random() >= params.read_share
            target = 1 if not multi or rng.random() < params.single_share else rng.choices(multi, weights=weights)[0]
            names = plan_walk(spec, adj, rng, target, want_write, flow=flow)
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
                if batched:
                    pending.append((sid, calls, final_hash, read_only, c))
                    seen.add(sid)
                    seen_calls.add(calls_key(calls))
                    n_reads += read_only
                    continue
                if params.verify_replay:
                    _check_replay(*replay(ep, calls), calls, final_hash, seed_hash, read_only)
                elif env.state_hash() != final_hash:
                    raise Dropped("read_changed_state" if read_only else "nondeterministic")
                keep(sid, calls, final_hash, read_only, c, [] if read_only else env.diff())
            except Dropped as d:
                dropped[d.reason] += 1
                continue
            seen.add(sid)
            seen_calls.add(calls_key(calls))
            n_reads += read_only
        if not pending:
            break
        oracle = env.state_oracle()
        for (sid, calls, final_hash, read_only, c), got in zip(pending, replay_many(ep, [p[1] for p in pending])):
            try:
                if isinstance(got, Dropped):
                    raise got
                h2, outs2, image = got
                _check_replay(h2, outs2, calls, final_hash, seed_hash, read_only)
                keep(sid, calls, final_hash, read_only, c, [] if read_only else oracle.diff(image, None))
            except Dropped as d:
                drop(d.reason, sid, calls, read_only)
        pending = []
    report = {
        "domain": domain_id, "split": split, "kept": len(kept), "attempts": attempts,
        "dropped": dict(sorted(dropped.items())), "counters": dict(sorted(counters.items())),
        "read_only": sum(s.read_only for s in kept), "write": sum(not s.read_only for s in kept),
        "lengths": dict(sorted(Counter(len(s.gold_calls) for s in kept).items())),
        "quality": scenario_quality(kept),
    }
    return kept, report


def _check_replay(h2: str, outputs: list[Any], calls: list[dict[str, Any]], final_hash: str, seed_hash: str,
                  read_only: bool) -> None:
    """The determinism check of a walk replayed from the seed: Dropped unless it reached the walk's
    final state and outputs (a read-only walk: the seed's state)."""
    if read_only and h2 != seed_hash:
        raise Dropped("read_changed_state")
    if h2 != final_hash or json.dumps(outputs, sort_keys=True, default=str) != \
            json.dumps([x["output"] for x in calls], sort_keys=True, default=str):
        raise Dropped("nondeterministic", "replay reached another state or output")


def build_scenarios(ws_or_domain_dir: Workspace | Path | str, domain_id: str, per_domain: int = 20,
                    max_length: int = 4, seed: int = 0, *, env: Any = None, force: bool = False,
                    unsafe: bool = False, intent_writer: IntentWriter | None = None,
                    llm: str | bool | None = None, **options: Any) -> dict[str, Any]:
    """Build and write domains/<id>/scenarios.jsonl; returns the report (see `_build_scenarios`).

    Holds the domain's lock (domains/<id>/.lock), so two runs on one workspace build it once."""
    domain_dir, _ = _resolve(ws_or_domain_dir, domain_id)
    with file_lock(domain_dir / ".lock"):
        return _build_scenarios(ws_or_domain_dir, domain_id, per_domain, max_length, seed, env=env, force=force,
                                unsafe=unsafe, intent_writer=intent_writer, llm=llm, **options)


def _build_scenarios(ws_or_domain_dir: Workspace | Path | str, domain_id: str, per_domain: int = 20,
                     max_length: int = 4, seed: int = 0, *, env: Any = None, force: bool = False,
                     unsafe: bool = False, intent_writer: IntentWriter | None = None,
                     llm: str | bool | None = None, **options: Any) -> dict[str, Any]:
    """Build and write domains/<id>/scenarios.jsonl; returns the report.

    Skips (report["skipped"] = True) when the file exists for the same params and environment.
    `env` may be an open Environment of this domain (reused, not closed); otherwise one is
    opened and closed here. Intents: `intent_writer` when given; else the LLM writer when a model
    endpoint is configured (`llm`, else AGENTSCALER_LLM_URL; `llm=False`: never); else the template.
    Extra options are ScenarioParams fields (read_share, heldout_fraction...).
    """
    params = ScenarioParams(per_domain=per_domain, max_length=max_length, seed=seed, **options)
    if intent_writer is None and llm is not False:
        intent_writer, source = configured_writer(llm or None)  # a model endpoint configured: LLM intents
        params = params.model_copy(update={"intents": source})
    elif intent_writer is not None:
        params = params.model_copy(update={"intents": getattr(intent_writer, "source", "custom")})
    domain_dir, ws = _resolve(ws_or_domain_dir, domain_id)
    spec = DomainSpec.load(domain_dir)
    out_path, meta_path = domain_dir / SCENARIOS, domain_dir / META_FILE
    env_hash = environment_hash(domain_dir)
    catalog = None
    if ws is not None:
        catalog = Catalog(ws.catalog_path)
    if not force and out_path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text("utf-8"))
        if meta.get("params_hash") == params.key() and meta.get("env_hash") == env_hash \
                and meta.get("file_hash") == _file_hash(out_path):
            write_state_oracle(domain_dir)  # (a workspace built before the file existed gets it)
            return {**meta.get("report", {}), "skipped": True, "path": str(out_path)}
    if catalog is not None:
        catalog.mark(domain_id, STAGE, "running")
    t0 = time.perf_counter()
    own_env = env is None
    try:
        if own_env:
            env = Environment.open(domain_dir, unsafe=unsafe)
        try:
            scenarios, report = generate(env, spec, domain_dir, domain_id, params, intent_writer)
            oracle = env.state_oracle()  # gold execution's: its seed digests are already computed
        finally:
            if own_env:
                env.close()
        atomic_write_jsonl(out_path, [s.model_dump(mode="json") for s in scenarios])
        write_state_oracle(domain_dir, oracle)  # the seed's digests, once here rather than at each verifier's opening
        report.update(seconds=round(time.perf_counter() - t0, 4), skipped=False, path=str(out_path))
        fh = _file_hash(out_path)
        atomic_write_json(meta_path, {"params": params.model_dump(), "params_hash": params.key(),
                                      "env_hash": env_hash, "file_hash": fh, "report": report})
    except Exception as exc:
        if catalog is not None:
            catalog.mark(domain_id, STAGE, "failed", error=error_text(exc))
        tag_stage(exc, STAGE)
        raise
    if catalog is not None:
        catalog.mark(domain_id, STAGE, "done", artifact=fh)
    return report


def _file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def build_all(ws: Workspace, domain_ids: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Every finished domain in turn; one failing domain is recorded and never stops the rest."""
    reports: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    ids = domain_ids if domain_ids is not None else ws.domain_ids()
    with progress.stage("scenarios", total=len(ids), unit="domains") as bar:
        for d in ids:
            try:
                reports.append(build_scenarios(ws, d, **kwargs))
            except Exception as exc:  # noqa: BLE001 - recorded in the catalog by build_scenarios
                failed[d] = f"{type(exc).__name__}: {exc}"[:500]
            bar.advance(note=d)
    dropped: Counter = Counter()
    for r in reports:
        dropped.update(r.get("dropped", {}))
    return {"domains": len(reports), "failed": failed, "skipped": sum(bool(r.get("skipped")) for r in reports),
            "scenarios": sum(r.get("kept", 0) for r in reports),
            "read_only": sum(r.get("read_only", 0) for r in reports), "write": sum(r.get("write", 0) for r in reports),
            "dropped": dict(sorted(dropped.items())), "reports": reports}
