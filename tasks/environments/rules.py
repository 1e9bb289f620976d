"""Rule-based environment synthesis (the embedded default: no LLM).

From a domain's tools: plan entities and tables and classify each tool (tasks.environments.plan),
seed rows (tasks.environments.seed) and tool code from templates (tasks.environments.render),
plus the dependency edges scenarios walk along. Everything is deterministic for a given
(domain id, seed); nothing generated is executed here.
"""

from __future__ import annotations

import random
from typing import Any

from agentscaler.models import Tool
from envs.spec import DomainSpec, Edge, TableSpec, ToolSpec
from envs.store import render_models_py
from tasks.environments.plan import Plan, plan_tools
from tasks.environments.render import HEADER, render_tool
from tasks.environments.seed import seed_rows
from tasks.environments.synthesis import Synthesis, discovered_edges


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


def infer_edges(plans: list[Plan], given: list[dict[str, Any]] | None) -> list[Edge]:
    """Edges from discovery (kept), plus data-flow edges: a tool yielding entity X's id feeds a
    tool needing X's id."""
    out = {(e.src, e.dst, e.kind): e for e in discovered_edges({p.name for p in plans}, given)}
    for a in plans:
        if a.action not in ("get", "search", "create"):
            continue
        produced = {a.entity} | {p.ref for p in a.params if p.role in ("fk",) and a.action in ("get", "search")}
        for b in plans:
            if b is a:
                continue
            needs = {p.ref for p in b.params if p.role in ("pk", "pk_list", "fk", "fk_list")}
            if a.entity in needs or (produced & needs and a.action == "get"):
                out.setdefault((a.name, b.name, "dataflow"), Edge(src=a.name, dst=b.name, kind="dataflow", weight=1.0))
    return [out[k] for k in sorted(out)]


def synthesize_rules(domain_id: str, tools: list[Tool], name: str = "", given_edges: list[dict] | None = None,
                     seed: int = 0, clock: str = "2024-05-15T15:00:00") -> Synthesis:
    """The whole rule-based synthesis of one domain, as data and text (nothing is executed)."""
    tools, skipped = dedupe_tools(sorted(tools, key=lambda t: t.name))
    if not tools:
        raise ValueError(f"domain {domain_id}: no tools to synthesize")
    rng = random.Random(f"{domain_id}:{seed}")
    plans, entities = plan_tools(tools)
    tables = [TableSpec(name=e.table, columns=list(e.columns.values()), primary_key=[e.pk])
              for _, e in sorted(entities.items())]
    specs = [ToolSpec(name=pl.name, description=pl.tool.description, parameters=pl.tool.parameters,
                      returns=pl.tool.returns, kind=pl.kind, source_tool_id=pl.tool.id or None) for pl in plans]
    edges = infer_edges(plans, given_edges)
    ents = sorted({pl.entity for pl in plans})
    spec = DomainSpec(id=domain_id, name=name or "_".join(ents[:3]) or domain_id,
                      description=f"Rule-synthesized environment over {', '.join(e.table for _, e in sorted(entities.items()))}.",
                      tools=specs, tables=tables, edges=edges, synthesizer="rules", seed=seed, clock=clock,
                      report={"plans": {pl.name: {"kind": pl.kind, "kind_reason": pl.kind_reason, "action": pl.action,
                                                  "entity": pl.entity} for pl in plans}})
    rows = seed_rows(entities, rng, clock)
    code = HEADER.format(id=domain_id, name=spec.name.replace('"', "'")) + "".join(
        "\n\n" + render_tool(pl, entities) for pl in plans)
    return Synthesis(spec=spec, models_py=render_models_py(spec), tools_py=code, rows=rows, skipped=skipped)
