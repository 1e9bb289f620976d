"""Domains: communities of the tool graph, split when too big, tiny ones attached, then checked.

Louvain/Leiden (igraph) on the undirected weighted view of the graph -> recursive split of
communities above max_size -> communities below min_size attached to the nearest domain
(centroid cosine) or grouped with each other -> the dependency check of each domain
(tasks.discover.check) -> records for graph/domains.json and the report.

Domain id = "d" + content_hash(sorted member tool ids)[:12]: the same members give the same id.
Edges in domains.json are directed: a dataflow edge once (producer -> consumer), a similar edge
both ways (it has no direction), so a walker that follows `src -> dst` sees every dependency.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import igraph as ig
import numpy as np

from agentscaler import progress
from agentscaler.hashing import content_hash
from agentscaler.models import Tool
from tasks.discover.check import dependency_check
from tasks.discover.config import DiscoverConfig
from tasks.discover.graph import undirected_weights, unit


def domain_id(tool_ids: list[str]) -> str:
    return "d" + content_hash(sorted(tool_ids))[:12]


def communities(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, method: str = "louvain",
                resolution: float = 1.0, seed: int = 0) -> list[int]:
    """Membership list for an undirected weighted graph; isolated vertices are their own community."""
    if n == 0:
        return []
    g = ig.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist())), directed=False)
    if g.ecount() == 0:
        return list(range(n))
    g.es["weight"] = [float(x) for x in w]
    ig.set_random_number_generator(random.Random(seed))  # deterministic runs
    try:
        if method == "leiden":
            part = g.community_leiden(objective_function="modularity", weights="weight",
                                      resolution=resolution, n_iterations=-1)
        elif method == "louvain":
            part = g.community_multilevel(weights="weight", resolution=resolution)
        else:
            raise ValueError(f"unknown community method {method!r}: louvain or leiden")
    finally:
        ig.set_random_number_generator(random)
    return list(part.membership)


def _groups(members: np.ndarray, membership: list[int]) -> list[np.ndarray]:
    by: dict[int, list[int]] = {}
    for m, c in zip(members.tolist(), membership):
        by.setdefault(c, []).append(m)
    return [np.asarray(v) for v in by.values()]


def _chunk_by_projection(members: np.ndarray, vecs: np.ndarray, max_size: int) -> list[np.ndarray]:
    """Last resort split (no usable edges): order along the first principal axis, cut in chunks."""
    x = vecs[members] - vecs[members].mean(axis=0)
    try:
        axis = np.linalg.svd(x, full_matrices=False)[2][0]
        order = np.argsort(x @ axis, kind="stable")
    except np.linalg.LinAlgError:
        order = np.arange(len(members))
    k = -(-len(members) // max_size)
    return [members[order[j * len(order) // k:(j + 1) * len(order) // k]] for j in range(k)]


def split_large(members: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray, vecs: np.ndarray,
                cfg: DiscoverConfig, resolution: float, depth: int = 0) -> list[np.ndarray]:
    """Split a community above max_size with higher resolution on its own subgraph, recursively."""
    if len(members) <= cfg.max_size:
        return [members]
    local = -np.ones(len(vecs), np.int64)
    local[members] = np.arange(len(members))
    mask = (local[src] >= 0) & (local[dst] >= 0)
    s, d, ww = local[src[mask]], local[dst[mask]], w[mask]
    parts: list[np.ndarray] = []
    res = resolution
    for _ in range(6):
        res *= 2
        parts = _groups(members, communities(len(members), s, d, ww, cfg.method, res, cfg.seed + depth))
        if len(parts) > 1:
            break
    if len(parts) <= 1 or depth > 20:
        parts = _chunk_by_projection(members, vecs, cfg.max_size)
    out: list[np.ndarray] = []
    for p in parts:
        out.extend(split_large(p, src[mask], dst[mask], w[mask], vecs, cfg, res, depth + 1)
                   if len(p) > cfg.max_size else [p])
    return out


def merge_tiny(groups: list[np.ndarray], vecs: np.ndarray, cfg: DiscoverConfig) -> tuple[list[np.ndarray], int, int]:
    """Attach groups below min_size to the nearest domain with room (centroid cosine >= attach_min_sim);
    group the rest with each other by nearest neighbour. Returns (groups, attached, grouped)."""
    big = [g for g in groups if len(g) >= cfg.min_size]
    tiny = [g for g in groups if len(g) < cfg.min_size]
    if not tiny:
        return groups, 0, 0
    attached = 0
    left: list[np.ndarray] = []
    if big:
        sizes = [len(g) for g in big]
        members = [list(g) for g in big]
        sims = _nearest_member_sims(tiny, big, vecs)
        for i in np.argsort(-sims.max(axis=1), kind="stable"):  # most confident first
            target = next((int(j) for j in np.argsort(-sims[i], kind="stable")[:5]
                           if sims[i, j] >= cfg.attach_min_sim and sizes[j] + len(tiny[i]) <= cfg.max_size), None)
            if target is None:
                left.append(tiny[i])
            else:
                members[target].extend(tiny[i].tolist())
                sizes[target] += len(tiny[i])
                attached += len(tiny[i])
        big = [np.asarray(m) for m in members]
    else:
        left = tiny
    grouped = 0
    if len(left) > 1:
        # nearest-neighbour graph among leftovers (no threshold), then the same community method
        lc = unit(np.stack([vecs[g].mean(axis=0) for g in left]))
        sims = lc @ lc.T
        np.fill_diagonal(sims, -np.inf)
        k = min(2, len(left) - 1)
        nn = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        s = np.repeat(np.arange(len(left)), k)
        d = nn.ravel()
        ww = sims[s, d]
        ok = ww >= cfg.group_min_sim  # unrelated leftovers stay apart rather than form a junk domain
        s, d, ww = s[ok], d[ok], ww[ok]
        memb = communities(len(left), s, d, ww, cfg.method, cfg.resolution, cfg.seed) if len(s) else list(range(len(left)))
        merged: dict[int, list[int]] = {}
        for gi, c in enumerate(memb):
            merged.setdefault(c, []).extend(left[gi].tolist())
        new = []
        for m in merged.values():
            m = np.asarray(m)
            new.extend(_chunk_by_projection(m, vecs, cfg.max_size) if len(m) > cfg.max_size else [m])
        grouped = int(sum(len(g) for g in new if len(g) >= cfg.min_size))
        left = new
    return big + left, attached, grouped


def _nearest_member_sims(tiny: list[np.ndarray], big: list[np.ndarray], vecs: np.ndarray,
                         block: int = 1024) -> np.ndarray:
    """(tiny, big) matrix: cosine of each tiny group's centroid to the nearest tool of each big group."""
    order = np.concatenate(big)
    starts = np.cumsum([0] + [len(g) for g in big[:-1]])
    tc = unit(np.stack([vecs[g].mean(axis=0) for g in tiny]))
    out = np.empty((len(tiny), len(big)), np.float32)
    for s in range(0, len(tiny), block):
        out[s:s + block] = np.maximum.reduceat(tc[s:s + block] @ vecs[order].T, starts, axis=1)
    return out


def find_domains(tools: list[Tool], vecs: np.ndarray, g, cfg: DiscoverConfig,
                 checker: Any = None) -> tuple[list[dict], dict]:
    """Partition tools into domains. Returns (domain records for domains.json, report dict).

    checker: optional second check after the rule-based one, called as
    checker(members, tools, decisions, kept, dropped) -> (kept, decisions, dropped), decisions in
    the same order (tasks.discover.check.LLMDependencyChecker: the LLM check)."""
    cfg = cfg.resolved()
    n = len(tools)
    if n == 0:
        return [], {"modularity": None, "n_domains": 0, "dropped": 0}
    src, dst, w = undirected_weights(g, cfg.flow_bonus)
    memb = communities(n, src, dst, w, cfg.method, cfg.resolution, cfg.seed)
    first = _groups(np.arange(n), memb)
    n_first = len(first)
    groups: list[np.ndarray] = []
    for grp in first:
        groups.extend(split_large(grp, src, dst, w, vecs, cfg, cfg.resolution))
    n_split = len(groups) - n_first
    groups, attached, grouped = merge_tiny(groups, vecs, cfg)

    # directed edges per group, for the check and domains.json
    comm = np.empty(n, np.int64)
    for ci, grp in enumerate(groups):
        comm[grp] = ci
    per: dict[int, list[tuple[int, int, str, float, str]]] = {}
    if g.ecount():
        el = np.asarray(g.get_edgelist(), dtype=np.int64)
        kinds, weights, keys_ = g.es["kind"], g.es["weight"], g.es["key"]
        for ei in np.flatnonzero(comm[el[:, 0]] == comm[el[:, 1]]).tolist():
            a, b = int(el[ei, 0]), int(el[ei, 1])
            per.setdefault(int(comm[a]), []).append((a, b, kinds[ei], float(weights[ei]), keys_[ei]))

    records, checks, n_dropped = [], [], 0
    with progress.stage("dependency check", total=len(groups), unit="domains") as bar:
        for ci, grp in enumerate(groups):
            kept, decisions, dropped = dependency_check(grp, tools, vecs, per.get(ci, []), cfg)
            if checker is not None:
                kept, decisions, dropped = checker(grp, tools, decisions, kept, dropped)
            n_dropped += len(dropped)
            kept = sorted(kept, key=lambda i: (tools[i].name, tools[i].id))
            kept_set = set(kept)
            ids = [tools[i].id for i in kept]
            did = domain_id(ids)
            out_edges = []
            for (a, b, kind, wt, _key), dec in zip(per.get(ci, []), decisions):
                if not dec["confirmed"] or a not in kept_set or b not in kept_set:
                    continue
                out_edges.append({"src": tools[a].name, "dst": tools[b].name, "kind": kind, "weight": round(wt, 4)})
                if kind == "similar":
                    out_edges.append({"src": tools[b].name, "dst": tools[a].name, "kind": kind, "weight": round(wt, 4)})
            out_edges.sort(key=lambda e: (e["src"], e["dst"], e["kind"]))
            records.append({"domain": did, "tools": ids, "names": [tools[i].name for i in kept], "edges": out_edges})
            checks.append({"domain": did, "size": len(kept), "dropped": dropped,
                           "edges_confirmed": sum(d["confirmed"] for d in decisions),
                           "edges_rejected": sum(not d["confirmed"] for d in decisions),
                           "edge_decisions": decisions[:200]})
            bar.advance()
    records.sort(key=lambda r: (-len(r["tools"]), r["domain"]))

    final = np.full(n, -1, np.int64)  # -1: dropped by the check
    index: dict[str, list[int]] = {}
    for i, t in enumerate(tools):
        index.setdefault(t.id, []).append(i)
    for ci, r in enumerate(records):
        for tid in r["tools"]:
            for i in index[tid]:
                final[i] = ci
    report = {"n_domains": len(records), "first_pass_communities": n_first, "split_added": n_split,
              "tiny_attached": attached, "tiny_grouped": grouped, "dropped": n_dropped,
              "modularity": _modularity(n, src, dst, w, final),
              "size_histogram": _histogram([len(r["tools"]) for r in records]),
              "largest": [{"domain": r["domain"], "size": len(r["tools"]), "names": r["names"][:40]} for r in records[:10]],
              "dependency_check": sorted(checks, key=lambda c: (-c["size"], c["domain"]))}
    return records, report


def _modularity(n: int, src, dst, w, membership: np.ndarray) -> float | None:
    keep = (membership[src] >= 0) & (membership[dst] >= 0) if len(src) else np.zeros(0, bool)
    if not keep.any():
        return None
    memb = membership.copy()
    memb[memb < 0] = memb.max() + 1  # dropped tools: one extra group
    g = ig.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist())), directed=False)
    return round(float(g.modularity(memb.tolist(), weights=[float(x) for x in w])), 4)


def _histogram(sizes: list[int]) -> dict[str, int]:
    bins = [(1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 40), (41, 80), (81, 10**9)]
    out = {}
    for lo, hi in bins:
        label = str(lo) if lo == hi else (f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}")
        c = sum(lo <= s <= hi for s in sizes)
        if c:
            out[label] = c
    return out


def score_partition(records: list[dict], labels: dict[str, str]) -> dict[str, Any]:
    """Purity (share of tools in their domain's majority label) and per-label completeness
    (share of a label's tools that sit in its single best domain)."""
    total = sum(len(r["tools"]) for r in records)
    if not total:
        return {"purity": 0.0, "completeness_min": 0.0, "completeness_mean": 0.0, "n_domains": 0}
    maj = sum(Counter(labels[t] for t in r["tools"]).most_common(1)[0][1] for r in records if r["tools"])
    comp = {}
    for lab, cnt in Counter(labels.values()).items():
        best = max((sum(labels[t] == lab for t in r["tools"]) for r in records), default=0)
        comp[lab] = best / cnt
    return {"purity": round(maj / total, 4), "completeness_min": round(min(comp.values()), 4),
            "completeness_mean": round(sum(comp.values()) / len(comp), 4), "completeness": comp,
            "n_domains": len(records)}
