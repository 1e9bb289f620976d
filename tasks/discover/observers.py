"""Reads grouped with the writes they observe: a step after community detection.

Community detection groups tools by similarity and data flow, so a domain can hold
`cancel_booking` while every read about bookings sits in another community: the domain's
environment then changes rows nobody can look at, and a write's effect is invisible. This step
gives such a domain the corpus's read tools about the entity its writes change (same entity noun,
or a synonym of it), those with the strongest graph edge to the domain first (then the most
similar to the write), at most `cap` per entity. They are recorded as shared members (the read
stays in its own domain too) with the reason. Where the corpus holds no read about the entity at
all, nothing is invented: the writes are listed as unobservable ("no read in the corpus"), so the
write-observability figure can say its ceiling.

How a tool reads (its kind and entity) is the environments stage's rule (tasks.environments.plan
.tool_reading); it is passed in as `reading`, because environments imports discover, not the
other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agentscaler.models import Tool
from agentscaler.naming import singular, synonyms

Reading = Callable[[Tool], tuple[str, str]]  # tool -> (kind "read"|"write", entity noun)
# nouns too general to say two tools are about one thing (a text's setter and a text-to-speech call)
VAGUE = frozenset({"value", "values", "text", "type", "data", "element", "result", "list", "string", "number",
                   "info", "information", "name", "async", "submit", "record", "object", "item_list", "date",
                   "time", "content", "input", "output", "request", "response", "entry", "field", "query"})


def same_entity(a: str, b: str) -> bool:
    """Whether two entity nouns name one thing: equal (singular), a synonym, or one is the other's
    last word (parking_session / session)."""
    if not a or not b:
        return False
    a, b = singular(a), singular(b)
    if a in VAGUE or b in VAGUE:
        return False
    return a == b or synonyms(a, b) or a.split("_")[-1] == b or b.split("_")[-1] == a


def _edge_weights(g: Any, n: int) -> dict[int, dict[int, tuple[float, str]]]:
    """vertex -> {neighbour: (strongest edge weight, its kind)} (vertex i is tools[i])."""
    out: dict[int, dict[int, tuple[float, str]]] = {}
    if g is None or not g.ecount():
        return out
    for (a, b), w, kind in zip(g.get_edgelist(), g.es["weight"], g.es["kind"]):
        if a < n and b < n:
            for x, y in ((a, b), (b, a)):
                d = out.setdefault(x, {})
                if float(w) > d.get(y, (0.0, ""))[0]:
                    d[y] = (float(w), kind)
    return out


def share_reads(records: list[dict[str, Any]], tools: list[Tool], vecs: np.ndarray | None, g: Any,
                reading: Reading, domain_id: Callable[[list[str]], str],
                cap: int = 3, max_size: int | None = None,
                known: list[tuple[str, str]] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each domain record whose writes change an entity no read of the domain is about gets the
    corpus's reads about it (module docstring). Returns (records, report); a changed record gets
    `shared` ([{tool, name, entity, for_writes, weight, reason}]), its new id (members changed) and
    `unobservable` ([{name, entity, why}]) where the corpus has no read about a write's entity.
    A domain never grows past `max_size` (discovery's bound); reads left out for it are counted.
    `known`: every tool's reading, in the order of `tools`, already computed (elsewhere, at once)."""
    by_id: dict[str, int] = {}
    for i, t in enumerate(tools):
        by_id.setdefault(t.id, i)
    read_of: dict[int, tuple[str, str]] = dict(enumerate(known)) if known is not None and len(known) == len(tools) \
        else {i: reading(t) for i, t in enumerate(tools)}
    corpus_reads = [(i, e) for i, (k, e) in read_of.items() if k == "read" and e]
    edges = _edge_weights(g, len(tools))
    out, shared_n, domains_n, unobs_n, full_n = [], 0, 0, 0, 0
    for rec in records:
        members = [by_id[t] for t in rec["tools"] if t in by_id]
        mset = set(members)
        read_entities = [read_of[i][1] for i in members if read_of[i][0] == "read"]
        wanted: dict[str, list[int]] = {}  # entity -> the domain's writes that change it
        for i in members:
            k, e = read_of[i]
            if k == "write" and e and not any(same_entity(e, r) for r in read_entities):
                wanted.setdefault(e, []).append(i)
        added: list[dict[str, Any]] = []
        unobservable: list[dict[str, Any]] = []
        for entity, writes in sorted(wanted.items()):
            covered = [a for a in added if same_entity(a["entity"], entity)]  # session / parking_session
            for a in covered:
                a["for_writes"] = sorted(set(a["for_writes"]) | {tools[w].name for w in writes})
            if covered:
                continue
            cands = [i for i, e in corpus_reads if i not in mset and same_entity(entity, e)]
            if not cands:
                unobservable += [{"name": tools[w].name, "entity": entity, "why": "no read in the corpus"}
                                 for w in writes]
                continue
            ranked = sorted((_strength(i, members, writes, edges, vecs, tools), i) for i in cands)
            for (edge, _sim, _name), i in ranked[:cap]:
                if max_size is not None and len(mset) >= max_size:
                    full_n += 1
                    continue
                mset.add(i)
                added.append({"tool": tools[i].id, "name": tools[i].name, "entity": entity,
                              "for_writes": sorted(tools[w].name for w in writes), "weight": round(-edge, 4)})
        for a in added:
            a["reason"] = (f"read about {a['entity']}, which {', '.join(a['for_writes'][:3])} change; "
                           f"no read of the domain is about it")
        if not added and not unobservable:
            out.append(rec)
            continue
        new = dict(rec)
        if added:
            kept = sorted(mset, key=lambda i: (tools[i].name, tools[i].id))
            new["tools"] = [tools[i].id for i in kept]
            new["names"] = [tools[i].name for i in kept]
            new["domain"] = domain_id(new["tools"])
            new["edges"] = rec["edges"] + _shared_edges(added, members, tools, by_id, edges)
            new["shared"] = added
            shared_n += len(added)
            domains_n += 1
        if unobservable:
            new["unobservable"] = unobservable
            unobs_n += len(unobservable)
        out.append(new)
    report = {"reads_shared": shared_n, "domains_given_reads": domains_n, "writes_unobservable": unobs_n,
              "cap": cap, "left_out_domain_full": full_n}
    return out, report


def _strength(i: int, members: list[int], writes: list[int], edges: dict[int, dict[int, tuple[float, str]]],
              vecs: np.ndarray | None, tools: list[Tool]) -> tuple[float, float, str]:
    """Sort key of a candidate read (smallest first): its strongest graph edge to the domain, then
    its similarity to the writes, then its name."""
    edge = max((edges.get(i, {}).get(m, (0.0, ""))[0] for m in members), default=0.0)
    sim = float(max(vecs[i] @ vecs[w] for w in writes)) if vecs is not None and len(vecs) else 0.0
    return (-edge, -sim, tools[i].name)


def _shared_edges(added: list[dict[str, Any]], members: list[int], tools: list[Tool], by_id: dict[str, int],
                  edges: dict[int, dict[int, tuple[float, str]]]) -> list[dict[str, Any]]:
    """The graph's edges between a shared read and the domain's members (both ways: a walk may go
    from the write to the read that shows it), marked `shared`."""
    out = []
    for a in added:
        i = by_id[a["tool"]]
        for m in members:
            w, kind = edges.get(i, {}).get(m, (0.0, ""))
            if w:
                for s, d in ((m, i), (i, m)):
                    out.append({"src": tools[s].name, "dst": tools[d].name, "kind": kind,
                                "weight": round(w, 4), "shared": True})
    return sorted(out, key=lambda e: (e["src"], e["dst"]))
