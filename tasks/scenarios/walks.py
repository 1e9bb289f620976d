"""Directed random walks on a domain's tool graph (DomainSpec.edges): the gold call sequences of scenarios.

A walk starts at a random tool and follows outgoing edges (weighted) until a target length or a
tool with no outgoing edge; read-only walks stay on read tools, write walks hold a write.
With the data-flow edges given, multi-call walks follow only them (an output of one tool feeds
the next: a lookup, then an action on what was found; a creation, then a change of what was
created), so the calls chain; where no data flows out of a tool, the walk is that one call
(two unrelated calls in a row teach little).
"""

from __future__ import annotations

import random

from envs.spec import DomainSpec

DATAFLOW_WEIGHT = 8.0  # a data-flow edge is this many times likelier to be followed than a similarity edge


def adjacency(spec: DomainSpec) -> dict[str, list[tuple[str, float]]]:
    names = {t.name for t in spec.tools}
    adj: dict[str, list[tuple[str, float]]] = {n: [] for n in sorted(names)}
    for e in spec.edges:
        if e.src in names and e.dst in names and e.src != e.dst:
            w = max(float(e.weight), 1e-6) * (DATAFLOW_WEIGHT if e.kind == "dataflow" else 1.0)
            adj[e.src].append((e.dst, w))
    return adj


def dataflow(spec: DomainSpec) -> dict[str, list[tuple[str, float]]]:
    """Only the data-flow edges (a chained walk's steps)."""
    names = {t.name for t in spec.tools}
    adj: dict[str, list[tuple[str, float]]] = {n: [] for n in sorted(names)}
    for e in spec.edges:
        if e.kind == "dataflow" and e.src in names and e.dst in names and e.src != e.dst:
            adj[e.src].append((e.dst, max(float(e.weight), 1e-6)))
    return adj


def random_walk(adj: dict[str, list[tuple[str, float]]], start: str, length: int,
                allowed: set[str], rng: random.Random) -> list[str]:
    """Follow outgoing edges (weighted) from start; stop at `length` or a tool with no allowed successor."""
    path = [start]
    while len(path) < length:
        nxt = [(d, w) for d, w in adj.get(path[-1], ()) if d in allowed and d != path[-1]]
        if not nxt:
            break
        path.append(rng.choices([d for d, _ in nxt], weights=[w for _, w in nxt])[0])
    return path


def plan_walk(spec: DomainSpec, adj: dict[str, list[tuple[str, float]]], rng: random.Random,
              target_len: int, want_write: bool, tries: int = 8,
              flow: dict[str, list[tuple[str, float]]] | None = None) -> list[str]:
    """A walk of the wanted kind and length: read-only walks stay on read tools; write walks hold a write.

    With `flow` (data-flow edges) and a target of two or more calls, the walk starts where data
    flows out (a read that finds records, or a write that creates or changes one) and follows
    only data-flow edges (a single call when none leaves an allowed tool). Walks that stop early
    at a dead end are retried from other starts; the best one found is returned (right kind
    first, then closest length).
    """
    kinds = {t.name: t.kind for t in spec.tools}
    reads = {n for n, k in kinds.items() if k == "read"}
    allowed = set(kinds) if want_write else reads
    if not allowed:
        return []
    best: list[str] = []
    best_score = (-1, -1, -1)
    graphs = [(flow, 1)] if flow is not None and target_len > 1 else [(adj, 0)]
    for graph, chained in graphs:
        starts = sorted(n for n in allowed if target_len == 1 or any(d in allowed for d, _ in graph.get(n, ())))
        if not starts:  # nothing chains here: one call
            starts = sorted(allowed)
            if want_write:
                starts = sorted(n for n in allowed if kinds[n] == "write") or starts
            return [rng.choice(starts)]
        if want_write and target_len == 1:
            starts = sorted(n for n in allowed if kinds[n] == "write") or starts
        if want_write and chained:  # create-then-change: start at a write whose output feeds another call
            starts = sorted(n for n in starts if kinds[n] == "write") or starts
        if not starts:
            continue
        for _ in range(tries):
            path = random_walk(graph, rng.choice(starts), target_len, allowed, rng)
            has_write = any(kinds[n] == "write" for n in path)
            score = (int(has_write == want_write), chained if len(path) > 1 else 0, -abs(target_len - len(path)))
            if score > best_score:
                best, best_score = path, score
            if score[0] == 1 and score[2] == 0:
                return best
    return best
