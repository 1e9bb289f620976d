"""Whether an environment hangs together: ids that resolve, and writes that some read shows.

Measured on the built environment (spec, seed, tool code in the sandbox), whatever synthesized it:
- id coherence: the share of id parameters (`user_id`, `vecId`, `id`) whose grounded value names a
  row the seed holds, or an id some write of the domain creates (seen in its output);
- write observability: the share of write tools whose effect some read tool shows: after the write,
  a read called with arguments drawn from the write's output and the changed row answers
  differently than on the seed (a new booking is found, a cancelled one shows its new status,
  a deleted one is gone, a seat count dropped). Measured twice: with the corpus's reads only
  (`write_observability`), and with the synthesized observers too
  (`write_observability_with_observers`; tasks.environments.rules.observer_plans);
- execution (in tasks.environments.validate): a grounded call returns a non-error, non-empty result.
Generated code runs only in the sandbox (`envs.episode.Environment`); nothing is executed here.
"""

from __future__ import annotations

import json
import random
from typing import Any

from agentscaler.artifacts import load_scenarios
from agentscaler.models import GoldCall
from agentscaler.naming import is_id_name, singular, snake
from envs.spec import DomainSpec, ToolSpec
from tasks.scenarios.arguments import StateView, ground_arguments, param_keys
from tasks.scenarios.quality import scenario_quality


def _pk_values(spec: DomainSpec, rows: dict[str, list[dict[str, Any]]]) -> dict[str, set[str]]:
    """key column -> values the seed holds under it (primary keys of every table)."""
    out: dict[str, set[str]] = {}
    for t in spec.tables:
        for k in t.primary_key[:1]:
            out.setdefault(k, set()).update(str(r.get(k)) for r in rows.get(t.name, []) if r.get(k) is not None)
    return out


def id_params(tool: ToolSpec) -> list[tuple[str, dict[str, Any]]]:
    """(name, scalar schema) of the tool's id parameters (an array of ids by its items' schema)."""
    props = (tool.parameters or {}).get("properties") or {}
    out = []
    for name, s in props.items():
        if not isinstance(s, dict) or not is_id_name(name):
            continue
        if s.get("type") == "array":
            s = s.get("items") if isinstance(s.get("items"), dict) else {}
        if s.get("type") in (None, "string", "integer", "number") or isinstance(s.get("type"), list):
            out.append((name, s))
    return out


def _created_keys(outputs: list[Any], seed_keys: dict[str, set[str]]) -> set[str]:
    """Id keys whose value in a write's output is new (not a seed key): ids the domain creates."""
    out: set[str] = set()

    def walk(obj: Any, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(v, (str, int)) and not isinstance(v, bool) and is_id_name(str(k)):
                    known = set().union(*[seed_keys.get(c, set()) for c in param_keys(str(k))])
                    if str(v) not in known:
                        out.add(snake(str(k)))
                elif isinstance(v, (dict, list)):
                    walk(v, depth + 1)
        elif isinstance(obj, list):
            for v in obj[:20]:
                walk(v, depth + 1)

    for o in outputs:
        walk(o, 0)
    return out


def id_coherence(spec: DomainSpec, state: StateView, write_outputs: list[Any], seed: int = 0,
                 tries: int = 3) -> dict[str, Any]:
    """Share of id parameters that resolve (module docstring); the unresolved ones are listed."""
    rng = random.Random(f"ids:{spec.id}:{seed}")
    keys = _pk_values(spec, state.rows)
    all_keys = set().union(*keys.values()) if keys else set()
    created = _created_keys(write_outputs, keys)
    total, unresolved = 0, []
    for t in spec.tools:
        ids = id_params(t)
        if not ids:
            continue
        seen: dict[str, bool] = {n: False for n, _ in ids}
        for _ in range(tries):
            args, _src = ground_arguments(t, state, [], rng, optional_prob=1.0)
            for n, _s in ids:
                v = args.get(n)
                vals = v if isinstance(v, list) else [v]
                if vals and all(x is not None and str(x) in all_keys for x in vals):
                    seen[n] = True
            if all(seen.values()):
                break
        for n, _s in ids:
            total += 1
            if not seen[n] and not any(k in created for k in param_keys(n)):
                unresolved.append(f"{t.name}.{n}")
    return {"id_params": total, "id_resolved": total - len(unresolved),
            "id_coherence": round((total - len(unresolved)) / total, 4) if total else None,
            "unresolved_ids": unresolved[:30]}


def _related(read: ToolSpec, tables: set[str], plans: dict[str, Any]) -> bool:
    """Whether a read is about one of the changed tables: by its plan where it has one (a read of
    `policy_violations` is not about `policies`), else by its name and description."""
    p = plans.get(read.name) or {}
    if p.get("table"):
        return p["table"] in tables
    text = f"{snake(read.name)} {read.description.lower()}"
    return any(singular(t) in text or t in text for t in tables)


def unobserved_why(tables: list[str], reads: list[ToolSpec], plans: dict[str, Any]) -> str:
    """Why a write that changed `tables` is not (yet) seen: no read of the domain is about those
    tables (the corpus gave the domain none: nothing synthesis can show it with), or some is and
    did not answer differently."""
    if not any(_related(rd, set(tables), plans) for rd in reads):
        return f"no read about {tables} in the domain"
    return f"no read shows the change to {tables}"


def _focus(rows: dict[str, list[dict[str, Any]]], diff: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The seed rows, each changed table narrowed to the rows the write changed (as they are now;
    a deleted one as it was), so a read's arguments point at what changed."""
    out = dict(rows)  # the unchanged tables' very lists: a StateView over these shares their index
    changed: dict[str, list[dict[str, Any]]] = {}
    for d in diff:
        t, key = d["table"], d["key"]
        old = next((r for r in rows.get(t, []) if all(r.get(k) == v for k, v in key.items())), None)
        if d.get("column") is None:
            row = d.get("after") if isinstance(d.get("after"), dict) else d.get("before")
            if isinstance(row, dict):
                changed.setdefault(t, []).append(dict(row))
        else:
            mine = changed.setdefault(t, [])
            cur = next((r for r in mine if all(r.get(k) == v for k, v in key.items())), None)
            if cur is None:
                cur = dict(old or key)
                mine.append(cur)
            cur[d["column"]] = d.get("after")
    out.update(changed)
    return out


def _key(res: Any) -> str:
    return json.dumps([bool(res.ok), res.content if res.ok else None], sort_keys=True, default=str)


def first_writes(gold: list[list[GoldCall]]) -> dict[str, list[dict[str, Any]]]:
    """Write tool -> arguments of gold write calls that are the first write of their scenario (each
    scenario's gold calls in `gold`), so the call alone, from the seed, is valid as it was in the
    scenario: only reads came before."""
    out: dict[str, list[dict[str, Any]]] = {}
    for calls in gold:
        w = next((c for c in calls if c.kind == "write"), None)
        if w is not None and w.arguments not in out.setdefault(w.name, []):
            out[w.name].append(w.arguments)
    return out


def observe_writes(env: Any, spec: DomainSpec, state: StateView, seed: int = 0, tries: int = 3,
                   max_reads: int = 12, examples: dict[str, list[dict[str, Any]]] | None = None
                   ) -> tuple[dict[str, Any], list[Any]]:
    """Which write tools some read shows (module docstring). Returns (report, outputs of the
    successful writes, for id coherence). Each write gets up to `tries` grounded calls until one
    changes the state (each try from the seed; a round of tries of all writes in one round trip); after it, up to
    `max_reads` reads (those about the changed tables first) get arguments drawn from the changed
    rows. Then one round trip (Environment.replay) runs each write again from the seed followed by
    its reads, and all the reads once more on the seed in one episode (reads change nothing); a
    read whose answer differs shows the write. A write that answers otherwise on its second run
    has its reads run on the state its first run left (restored from its image).

    `examples` (first_writes of the domain's scenarios): valid arguments, tried after the grounded
    calls failed. An API with real checks (tau2's: a payment method the user owns, a delivered
    order, a reason from a list) rejects random grounded arguments, and a write never made says
    nothing about whether a read shows it; the read side is unchanged."""
    oracle = env.state_oracle()
    orng = random.Random(f"observe-observers:{spec.id}:{seed}")
    plans = (spec.report or {}).get("plans") or {}
    reads = [t for t in spec.tools if t.kind == "read" and t.origin == "corpus"]
    observers = [t for t in spec.tools if t.kind == "read" and t.origin != "corpus"]
    writes = [t for t in spec.tools if t.kind == "write"]
    per: dict[str, dict[str, Any]] = {}
    outputs: list[Any] = []
    # each write's own random stream (its tries, then its reads' arguments): what it draws does not
    # depend on how the tries are grouped
    rngs = {w.name: random.Random(f"observe:{spec.id}:{seed}:{w.name}") for w in writes}
    given = {w.name: [None] * tries + list((examples or {}).get(w.name, []))[:tries] for w in writes}
    changed: dict[str, tuple[dict[str, Any], Any, bytes, list[dict[str, Any]]]] = {}
    for w in writes:
        per[w.name] = {"observed": False, "changed": False, "by": None, "why": "no call changed the state",
                       "observed_with_observers": False, "by_any": None}
    # Tries in rounds: every write not yet seen to change the state gets its next try, and the
    # round's calls run in one round trip, each from the seed with the image after it
    # (Environment.replay(images=True), as call_from_seed runs one call)
    todo = list(writes)
    for k in range(2 * tries):
        batch = [(w, given[w.name][k] if given[w.name][k] is not None else
                  ground_arguments(w, state, [], rngs[w.name], optional_prob=0.6)[0])
                 for w in todo if k < len(given[w.name])]
        if not batch:
            break
        for (w, args), (results, image) in zip(batch, env.replay([[(w.name, args)] for w, args in batch],
                                                                 images=True)):
            r, res = per[w.name], results[0]
            if not res.ok:
                r["why"] = f"write failed: {(res.error or '')[:120]}"
                continue
            outputs.append(res.content)
            diff = oracle.diff(image, None)
            if not diff:
                r["why"] = "the write changed nothing"
                continue
            r["changed"] = True
            changed[w.name] = (args, res, image, diff)
        todo = [w for w in todo if w.name not in changed]
    pending: list[tuple[str, list[tuple[str, dict[str, Any]]], list[Any], list[str]]] = []
    for w in writes:
        if w.name not in changed:
            continue
        r = per[w.name]
        args, res, image, diff = changed[w.name]
        tables = sorted({d["table"] for d in diff})
        rows = []
        for d in diff:  # the changed rows as the read's earliest source of values
            row = dict(d["key"])
            if isinstance(d.get("after"), dict):
                row.update({k: v for k, v in d["after"].items() if v is not None})
            elif isinstance(d.get("before"), dict):  # a deleted row: a read that found it should not now
                row.update({k: v for k, v in d["before"].items() if v is not None})
            elif d.get("column"):
                row[d["column"]] = d.get("after")
            rows.append(row)
        # the corpus's reads (those about the changed tables first), then synthesized observers
        # of the changed tables (tasks.environments.rules.observer_plans), counted apart
        cands = sorted(reads, key=lambda t: (not _related(t, set(tables), plans), t.name))[:max_reads]
        after_state = StateView(spec, rows=_focus(state.rows, diff), base=state)  # what changed, as a read may find it
        calls = [(rd.name, ground_arguments(rd, after_state, [*rows, res.content], rngs[w.name], optional_prob=0.2)[0])
                 for rd in cands]
        r["why"] = unobserved_why(tables, reads, plans) if calls else "no read tool in the domain"
        # then the synthesized observers of the changed tables (their own draws: the corpus
        # reads' arguments stay what they were before observers existed)
        calls += [(o.name, ground_arguments(o, after_state, [*rows, res.content], orng, optional_prob=0.2)[0])
                  for o in observers if _related(o, set(tables), plans)]
        if calls:
            pending.append((w.name, calls, (w.name, args, res, image), tables))
    if pending:
        # One round trip: each write again from the seed followed by its reads (one episode each),
        # then all the reads on the seed (one episode: reads change nothing)
        got = list(env.replay([[write[:2], *calls] for _, calls, write, _ in pending]
                              + [[c for _, calls, _, _ in pending for c in calls]]))
        before = got[-1][0]
        for k, ((name, calls, (_, args, res, image), tables), (results, _)) in enumerate(zip(pending, got)):
            if results[0].text() == res.text():
                pending[k] = (name, calls, results[1:], tables)
            else:  # the write answered otherwise on its second run: its reads on the state it first left
                env.restore(image)
                pending[k] = (name, calls, env.call_batch(calls), tables)
        i = 0
        synth = {o.name for o in observers}
        for name, calls, after, _tables in pending:
            seed_side = before[i:i + len(calls)]
            i += len(calls)
            hits = [c[0] for c, x, y in zip(calls, after, seed_side) if _key(x) != _key(y)]
            corpus_hit = next((h for h in hits if h not in synth), None)
            if corpus_hit:
                per[name].update(observed=True, by=corpus_hit, why=None)
            if hits:
                per[name].update(observed_with_observers=True, by_any=hits[0])
    n = len(per)
    seen = sum(r["observed"] for r in per.values())
    seen_o = sum(r["observed_with_observers"] for r in per.values())
    return ({"writes": n, "writes_observed": seen, "write_observability": round(seen / n, 4) if n else None,
             "unobserved": {k: v["why"] for k, v in per.items() if not v["observed"]},
             # the same writes, with the domain's synthesized observers beside its corpus reads
             "observers": len(observers), "writes_observed_with_observers": seen_o,
             "write_observability_with_observers": round(seen_o / n, 4) if n else None,
             "unobserved_with_observers": {k: v["why"] for k, v in per.items() if not v["observed_with_observers"]}},
            outputs)


def environment_quality(env: Any, spec: DomainSpec, state: StateView, seed: int = 0,
                        examples: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Id coherence and write observability of one open environment (the seed in `state`;
    `examples`: valid write arguments from the domain's scenarios, see observe_writes)."""
    obs, outputs = observe_writes(env, spec, state, seed, examples=examples)
    ids = id_coherence(spec, state, outputs, seed)
    return {**ids, **obs}


def _ratio(rows: list[dict[str, Any]], num: str, den: str) -> float | None:
    d = sum(r.get(den) or 0 for r in rows)
    return round(sum(r.get(num) or 0 for r in rows) / d, 4) if d else None


def quality_summary(ws: Any) -> dict[str, Any]:
    """The workspace's environment and scenario quality: per domain (from each spec's report and
    its scenarios) and pooled over the synthesized domains (imported ones, such as the tau2
    verticals, are counted apart). Shares are None where nothing was measured."""
    domains = []
    for did in ws.domain_ids():
        try:
            spec = DomainSpec.load(ws.domain_dir(did))
        except (OSError, ValueError):
            continue
        q = (spec.report or {}).get("quality") or {}
        v = (spec.report or {}).get("validation") or {}
        sq = scenario_quality(load_scenarios(ws, did))
        bad = {k: len(v) for k, v in ((spec.report or {}).get("bad_input") or {}).items()}
        domains.append({"domain": did, "name": spec.name, "synthesizer": spec.synthesizer, "tools": len(spec.tools),
                        "bad_input": bad,
                        "executes": v.get("executes"), "execute_rate": v.get("execute_rate"),
                        "merged": ((spec.report or {}).get("near_duplicates") or {}).get("merged", 0),
                        "observers": sum(t.origin == "synthesized" for t in spec.tools),
                        **{k: q.get(k) for k in ("id_params", "id_resolved", "id_coherence", "writes",
                                                 "writes_observed", "write_observability",
                                                 "writes_observed_with_observers",
                                                 "write_observability_with_observers")},
                        **{k: sq[k] for k in ("scenarios", "multi_call", "chained", "chain_share", "gold_reads",
                                              "gold_reads_nonempty", "nonempty_read_share", "kinds")}})
    synth = [d for d in domains if d["synthesizer"] != "tau2"]
    kinds: dict[str, int] = {}
    bad: dict[str, int] = {}
    for d in synth:
        for k, n in d["kinds"].items():
            kinds[k] = kinds.get(k, 0) + n
        for k, n in d["bad_input"].items():
            bad[k] = bad.get(k, 0) + n
    measured = [d for d in synth if d["execute_rate"] is not None]
    pooled = {"domains": len(synth), "tools": sum(d["tools"] for d in synth),
              "merged": sum(d["merged"] for d in synth),
              "id_coherence": _ratio(synth, "id_resolved", "id_params"),
              "write_observability": _ratio(synth, "writes_observed", "writes"),
              "observers": sum(d["observers"] for d in synth),
              "write_observability_with_observers": (  # None for environments built before observers
                  _ratio(synth, "writes_observed_with_observers", "writes")
                  if any(d["writes_observed_with_observers"] is not None for d in synth) else None),
              "execute_rate": _ratio(measured, "executes", "tools"),
              "chain_share": _ratio(synth, "chained", "multi_call"),
              "nonempty_read_share": _ratio(synth, "gold_reads_nonempty", "gold_reads"), "kinds": kinds,
              "bad_input": dict(sorted(bad.items()))}
    return {"pooled": pooled, "domains": domains, "imported": [d for d in domains if d["synthesizer"] == "tau2"]}
