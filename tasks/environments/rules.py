"""Rule-based environment synthesis (the embedded default: no LLM).

From a domain's tools: bad input made usable (tasks.environments.bad_input), near-duplicates
merged (tasks.environments.dedupe), entities, tables, kinds and effects planned
(tasks.environments.plan), seed rows (tasks.environments.seed) and tool code from templates
(tasks.environments.render), plus the dependency edges scenarios walk along. Everything is
deterministic for a given (domain id, seed); nothing generated is executed here.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from agentscaler.models import Tool
from envs.spec import DomainSpec, Edge, TableSpec, ToolSpec
from envs.store import render_models_py
from tasks.environments.bad_input import inspect_tool
from tasks.environments.dedupe import alias_report, merge_near_duplicates
from tasks.environments.plan import Entity, Param, Plan, plan_tools
from tasks.environments.render import HEADER, render_tool
from tasks.environments.seed import seed_rows
from tasks.environments.synthesis import Synthesis, discovered_edges
from tasks.environments.verbs import classify

# actions whose output holds records the caller did not name (their ids are new to the caller)
_FINDS = ("search", "create", "login")
# actions whose output is the record the caller named: only the ids it refers to are new
_RETURNS = ("get", "update", "status", "extend", "refill", "balance")


def dedupe_tools(tools: list[Tool]) -> tuple[list[Tool], dict[str, str]]:
    """Keep the first tool of each name (tool code has one function per name); report the rest."""
    seen: set[str] = set()
    out, skipped = [], {}
    for t in tools:
        if t.name in seen:
            skipped[t.name] = "duplicate_name"
            continue
        seen.add(t.name)
        out.append(t)
    return out, skipped


def prepare_tools(tools: list[Tool]) -> tuple[list[Tool], dict[str, str], dict[str, str], dict[str, list[str]]]:
    """Tools ready to plan: (kept tools, skipped name -> reason, alias -> representative, bad input
    reason -> tool names). Shared by the rule-based and the LLM synthesizer."""
    tools, skipped = dedupe_tools(sorted(tools, key=lambda t: t.name))
    fixed, bad = [], {}
    for t in tools:
        t2, problems = inspect_tool(t)
        fixed.append(t2)
        for p in problems:
            bad.setdefault(p, []).append(t.name)
    kinds = {}
    for t in fixed:
        kinds[t.name], why = classify(t)
        if why == "default":
            bad.setdefault("no_verb", []).append(t.name)
    kept, aliases = merge_near_duplicates(fixed, kinds)
    return kept, skipped, aliases, bad


def infer_edges(plans: list[Plan], given: list[dict[str, Any]] | None,
                entities: dict[str, Entity] | None = None) -> list[Edge]:
    """Edges from discovery (kept), plus data-flow edges: a tool whose output holds an id the
    caller did not give (a search finds records, a creation makes one, a lookup returns a record
    with the ids it refers to) feeds a tool that takes that id."""
    out = {(e.src, e.dst, e.kind): e for e in discovered_edges({p.name for p in plans}, given)}
    refs: dict[str, set[str]] = {}
    for name, e in (entities or {}).items():
        by_table = {x.table: x.name for x in (entities or {}).values()}
        refs[name] = {by_table[c.foreign_key.split(".")[0]] for c in e.columns.values()
                      if c.foreign_key and c.foreign_key.split(".")[0] in by_table} | set(e.list_refs.values())
    for a in plans:
        if a.action in _FINDS:
            produced = {a.entity} | refs.get(a.entity, set())
        elif a.action in _RETURNS:
            produced = refs.get(a.entity, set()) | {p.ref for p in a.params if p.role == "fk" and a.kind == "read"} - \
                {p.ref for p in a.params if p.role in ("pk", "fk")}
        else:
            continue
        for b in plans:
            if b is a:
                continue
            needs = {p.ref for p in b.params if p.role in ("pk", "pk_list", "fk", "fk_list")}
            if produced & needs:
                out.setdefault((a.name, b.name, "dataflow"), Edge(src=a.name, dst=b.name, kind="dataflow", weight=1.0))
    return [out[k] for k in sorted(out)]


OBSERVER_NOTE = "synthesized observer: the corpus has no read of this record"


def observer_plans(plans: list[Plan], entities: dict[str, Entity]) -> list[Plan]:
    """A read per written entity that no read of the domain is about (nor a read of a record it
    belongs to, which lists it when its creates name that record): `get_<entity>(<entity>_id)`,
    the lookup a real API almost always has beside its writes, which the corpus excerpt lacks.
    Planned as the rules plan any get by its own key (and rendered by the same template), built
    directly rather than re-planned from its name: a name such as get_source_map would be read
    as a map's lookup. The corpus's plans and entities are left as they were."""
    read = {pl.entity for pl in plans if pl.kind == "read"}
    # a record a read of its parent lists, when every create of it names that parent
    creates: dict[str, list[Plan]] = {}
    for pl in plans:
        if pl.action == "create":
            creates.setdefault(entities[pl.entity].table, []).append(pl)
    listed = {t for n in read if n in entities for t, col, _ in entities[n].children
              if all(any(p.column == col for p in pl.params) for pl in creates.get(t, []))}
    names = {pl.name for pl in plans}
    out = []
    for name in sorted({pl.entity for pl in plans if pl.kind == "write"}):
        e = entities.get(name)
        if e is None or name in read or e.table in listed:
            continue
        tname = f"get_{name}"[:60]
        while tname in names:
            tname += "_record"
        names.add(tname)
        words = name.replace("_", " ")
        pk_schema = {"type": "integer" if e.pk_type == "integer" else "string", "description": f"The id of the {words}."}
        tool = Tool(name=tname, source_name=tname, source="synthesized", kind="read",
                    description=f"Get the details of one {words} by its id.",
                    parameters={"type": "object", "properties": {e.pk: pk_schema}, "required": [e.pk]})
        out.append(Plan(tool=tool, name=tname, kind="read", action="get", verb="get", entity=name,
                        params=[Param(name=e.pk, schema=pk_schema, required=True, role="pk", column=e.pk, ref=name)],
                        kind_reason="synthesized"))
    return out


def domain_name(plans: list[Plan], entities: dict[str, Entity]) -> str:
    """The domain's name: its main nouns (the entities most tools act on), never verbs or tags."""
    uses = Counter(pl.entity for pl in plans)
    top = sorted(uses, key=lambda n: (-uses[n], n))[:3]
    return "_".join(dict.fromkeys(w for n in top for w in n.split("_")))[:60] or "records"


def readable_name(domain_id: str, tools: list[Tool]) -> str:
    """How a person finds a domain before it is built (Prefect task-run names, tables): the name
    rule-based synthesis will give it, then its id; just the id when its tools cannot be planned
    (that error is the build's to report)."""
    try:
        plans, entities = plan_tools(prepare_tools(tools)[0])
        return f"{domain_name(plans, entities)} {domain_id}"
    except Exception:  # noqa: BLE001 - a name is a convenience; the build reports what is wrong
        return domain_id


def synthesize_rules(domain_id: str, tools: list[Tool], name: str = "", given_edges: list[dict] | None = None,
                     seed: int = 0, clock: str = "2024-05-15T15:00:00") -> Synthesis:
    """The whole rule-based synthesis of one domain, as data and text (nothing is executed)."""
    tools, skipped, aliases, bad = prepare_tools(tools)
    if not tools:
        raise ValueError(f"domain {domain_id}: no tools to synthesize")
    rng = random.Random(f"{domain_id}:{seed}")
    plans, entities = plan_tools(tools)
    added = observer_plans(plans, entities)  # reads not from the corpus, marked as such below
    observers = {pl.name for pl in added}
    plans = plans + added
    tables = [TableSpec(name=e.table, columns=list(e.columns.values()), primary_key=[e.pk])
              for _, e in sorted(entities.items())]
    specs = [ToolSpec(name=pl.name, description=pl.tool.description, parameters=pl.tool.parameters,
                      returns=pl.tool.returns, kind=pl.kind, source_tool_id=pl.tool.id or None,
                      origin="synthesized" if pl.name in observers else "corpus") for pl in plans]
    edges = infer_edges(plans, given_edges, entities)
    dname = name or domain_name(plans, entities)
    spec = DomainSpec(id=domain_id, name=dname,
                      description=f"Rule-synthesized environment over {', '.join(e.table for _, e in sorted(entities.items()))}.",
                      tools=specs, tables=tables, edges=edges, synthesizer="rules", seed=seed, clock=clock,
                      report={"plans": {pl.name: {"kind": pl.kind, "kind_reason": pl.kind_reason, "action": pl.action,
                                                  "entity": pl.entity, "table": entities[pl.entity].table,
                                                  "verb": pl.verb,
                                                  **({"origin": "synthesized"} if pl.name in observers else {}),
                                                  **({"anchor": entities[pl.anchor].table} if pl.anchor else {}),
                                                  **({"states": {pl.status_col: list(pl.status_from)}}
                                                     if pl.status_from else {})}
                                 for pl in plans},
                              "entities": {e.name: {"table": e.table, "key": e.pk, "states": e.statuses,
                                                    "quantity": e.quantity or None, "balance": e.balance or None}
                                           for _, e in sorted(entities.items())},
                              "near_duplicates": alias_report(aliases),
                              "observers": {"synthesized": sorted(observers), "note": OBSERVER_NOTE},
                              "bad_input": {k: sorted(v) for k, v in sorted(bad.items())}})
    rows = seed_rows(entities, rng, clock)
    code = HEADER.format(id=domain_id, name=spec.name.replace('"', "'")) + "".join(
        "\n\n" + render_tool(pl, entities) for pl in plans)
    return Synthesis(spec=spec, models_py=render_models_py(spec), tools_py=code, rows=rows,
                     skipped={**skipped, **{a: f"near_duplicate_of:{r}" for a, r in aliases.items()}})
