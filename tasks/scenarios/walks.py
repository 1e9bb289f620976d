"""Directed random walks on a domain's tool graph (DomainSpec.edges): the gold call sequences of scenarios.

A walk starts at a random tool and follows outgoing edges (weighted) until a target length or a
tool with no outgoing edge; read-only walks stay on read tools, write walks hold a write.
"""

from __future__ import annotations

import random

from envs.spec import DomainSpec


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
