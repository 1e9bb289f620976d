"""The tool dependency graph: cosine "similar" edges and directed "dataflow" edges, in igraph.

- similar: cosine between tool vectors >= threshold, top-k neighbours per tool, computed with
  blocked matrix products (a 1,024-row block against all tools at a time; never an n^2 Python loop).
  Stored once per pair (undirected meaning); `domains.json` lists it both ways.
- dataflow: directed A -> B when an output key of A (a field of its `returns`, the entity it
  reads such as `get_user` -> `user_id`) is a required input of B. A shared key alone is weak
  evidence across a 30k corpus (`user_id` is everywhere), so a pair also needs cosine >=
  flow_min_sim, and only the flow_top_k most similar producers per (consumer, key) are kept.
"""

from __future__ import annotations

import io
import pickle
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import igraph as ig
import numpy as np
import pandas as pd

from agentscaler import progress
from agentscaler.models import Tool
from agentscaler.naming import singular, snake
from agentscaler.workspace import atomic_write_bytes

GENERIC_KEYS = set("""a b c x y z n id ids name names type types value values result results data status message
messages query text content number numbers limit offset page size count amount key keys item items info
details description title format mode option options flag enabled date time start end from to input output
payload body request response args kwargs params parameters filter filters sort order path url""".split())


def unit(v: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero)."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, n, out=np.zeros_like(v), where=n > 0)


def input_keys(tool: Tool) -> set[str]:
    """Required inputs (all inputs when the schema lists none as required), normalized."""
    params = tool.parameters if isinstance(tool.parameters, dict) else {}
    props = params.get("properties") or {}
    req = params.get("required")
    names = req if isinstance(req, list) and req else list(props)
    return {k for k in (snake(n) for n in names if isinstance(n, str)) if k and k not in GENERIC_KEYS}


_READ_VERB = re.compile(r"^(get|find|search|lookup|list|fetch|retrieve|read|show|query|check|create|add|book|make|new|register|open)_(.+)$")


def output_keys(tool: Tool) -> set[str]:
    """What a tool hands back: fields of `returns` (one level deep), entity ids from its name or return title."""
    out: set[str] = set()
    ret = tool.returns if isinstance(tool.returns, dict) else {}
    entity = snake(ret.get("title", "")) if isinstance(ret.get("title"), str) else ""
    props = ret.get("properties") if isinstance(ret.get("properties"), dict) else {}
    if ret.get("type") == "array" and isinstance(ret.get("items"), dict):
        props = ret["items"].get("properties") or props
        entity = entity or snake(ret["items"].get("title", "") or "")
    for k, v in props.items():
        k = snake(k)
        out.add(k)
        if isinstance(v, dict) and v.get("type") == "array" and not k.endswith("_ids"):
            out.add(singular(k) + "_id")  # "orders": [order ids] -> order_id
        if k.endswith("_ids"):
            out.add(k[:-1])
        if isinstance(v, dict) and isinstance(v.get("properties"), dict):
            out.update(snake(kk) for kk in v["properties"])
    if entity:
        out.add(entity + "_id")
        if "id" in props:
            out.add(entity + "_id")
    m = _READ_VERB.match(snake(tool.name))
    if m:
        rest = re.sub(r"_(details?|info|by_.*|list|all)$", "", m.group(2))
        rest = re.sub(r"_(details?|info)$", "", rest)
        if "_id" in rest:  # find_user_id_by_email -> user_id
            out.add(rest[: rest.index("_id") + 3])
        elif rest:
            out.add(singular(rest.split("_")[-1]) + "_id")
    return {k for k in out if k and k not in GENERIC_KEYS}


def similarity_edges(vecs: np.ndarray, threshold: float, top_k: int = 15,
                     block: int = 1024) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected pairs (i < j) with cosine >= threshold among each tool's top_k neighbours."""
    n = len(vecs)
    if n < 2:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, np.float32)
    k = min(top_k, n - 1)
    srcs, dsts, ws = [], [], []
    with progress.stage("similar tools", total=n, unit="tools") as bar:  # a 30k corpus: minutes on a loaded machine
        for start in range(0, n, block):
            rows = vecs[start:start + block]
            sims = rows @ vecs.T
            idx = np.arange(len(rows))
            sims[idx, start + idx] = -np.inf  # no self loops
            # the top_k among the pairs over the threshold (the top_k of the whole row that pass it):
            # a few candidates per row, instead of partitioning 30k columns per row (issue 20 aim 6)
            # a flat scan and divmod: the same pairs in the same order as np.nonzero's two-axis scan, ~4x faster
            r, c = np.divmod(np.flatnonzero(sims >= threshold), sims.shape[1])
            w = sims[r, c]
            order = np.lexsort((c, -w, r))  # by row, best first, ties by column
            r, c, w = r[order], c[order], w[order]
            rank = np.arange(len(r)) - np.searchsorted(r, r)  # place within its row
            keep = rank < k
            srcs.append(start + r[keep])
            dsts.append(c[keep])
            ws.append(w[keep])
            bar.advance(len(rows))
    src, dst, w = np.concatenate(srcs), np.concatenate(dsts), np.concatenate(ws).astype(np.float32)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pair = lo.astype(np.int64) * n + hi
    _, first = np.unique(pair, return_index=True)
    return lo[first], hi[first], w[first]


def dataflow_edges(tools: list[Tool], vecs: np.ndarray, flow_min_sim: float, flow_top_k: int = 5,
                   ) -> list[tuple[int, int, float, str]]:
    """Directed (producer, consumer, cosine, key) edges; see the module docstring."""
    producers: dict[str, list[int]] = defaultdict(list)
    consumers: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        for k in output_keys(t):
            producers[k].append(i)
        for k in input_keys(t):
            consumers[k].append(i)
    best: dict[tuple[int, int], tuple[float, str]] = {}
    keys = sorted(set(producers) & set(consumers))
    with progress.stage("dataflow links", total=len(keys), unit="keys") as bar:
        for key in keys:
            P = np.asarray(producers[key])
            C = np.asarray(consumers[key])
            for cs in range(0, len(C), 512):
                cb = C[cs:cs + 512]
                sims = vecs[cb] @ vecs[P].T
                sims[cb[:, None] == P[None, :]] = -np.inf  # a tool does not feed itself
                k = min(flow_top_k, len(P))
                part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
                top = np.take_along_axis(sims, part, axis=1)
                for r, c in enumerate(cb):
                    for j in range(k):
                        s = float(top[r, j])
                        if s >= flow_min_sim:
                            pair = (int(P[part[r, j]]), int(c))
                            if pair not in best or best[pair][0] < s:
                                best[pair] = (s, key)
            bar.advance()
    return [(a, b, s, key) for (a, b), (s, key) in sorted(best.items())]


def build_graph(tools: list[Tool], vecs: np.ndarray, threshold: float, top_k: int = 15,
                flow_min_sim: float = 0.3, flow_top_k: int = 5):
    """igraph Graph (directed): vertices = tools (name, tool_id); edges with kind, weight, key."""
    n = len(tools)
    s, d, w = similarity_edges(vecs, threshold, top_k)
    flows = dataflow_edges(tools, vecs, flow_min_sim, flow_top_k) if n > 1 else []
    edges = list(zip(s.tolist(), d.tolist())) + [(a, b) for a, b, _, _ in flows]
    g = ig.Graph(n=n, edges=edges, directed=True)
    g.vs["name"] = [t.name for t in tools]
    g.vs["tool_id"] = [t.id for t in tools]
    g.es["kind"] = ["similar"] * len(s) + ["dataflow"] * len(flows)
    g.es["weight"] = [float(x) for x in w] + [float(x[2]) for x in flows]
    g.es["key"] = [""] * len(s) + [x[3] for x in flows]
    return g


def undirected_weights(g, flow_bonus: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i < j) with summed weights: a dataflow edge adds flow_bonus to its pair (it is real evidence)."""
    if g.ecount() == 0:
        e = np.zeros(0, np.int64)
        return e, e, np.zeros(0, np.float64)
    el = np.asarray(g.get_edgelist(), dtype=np.int64)
    w = np.asarray(g.es["weight"], dtype=np.float64)
    flow = np.asarray([k == "dataflow" for k in g.es["kind"]])
    w = np.where(flow, flow_bonus, w)  # the pair's similarity is already counted when it is a similar edge
    lo, hi = el.min(axis=1), el.max(axis=1)
    pair = lo * max(g.vcount(), 1) + hi
    uniq, inv = np.unique(pair, return_inverse=True)
    tot = np.zeros(len(uniq))
    np.add.at(tot, inv, w)
    n = max(g.vcount(), 1)
    return uniq // n, uniq % n, tot


def save_graph(g, graph_dir: Path) -> dict[str, Any]:
    """graph/graph.pickle (igraph) and graph/edges.parquet (src, dst tool names and ids, kind, weight, key)."""
    graph_dir = Path(graph_dir)
    atomic_write_bytes(graph_dir / "graph.pickle", pickle.dumps(g, protocol=pickle.HIGHEST_PROTOCOL))
    el = g.get_edgelist()
    names, ids = g.vs["name"] if g.vcount() else [], g.vs["tool_id"] if g.vcount() else []
    df = pd.DataFrame({
        "src": [names[a] for a, _ in el], "dst": [names[b] for _, b in el],
        "src_id": [ids[a] for a, _ in el], "dst_id": [ids[b] for _, b in el],
        "kind": g.es["kind"] if el else [], "weight": g.es["weight"] if el else [], "key": g.es["key"] if el else [],
    })
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    atomic_write_bytes(graph_dir / "edges.parquet", buf.getvalue())
    kinds = g.es["kind"] if el else []
    return {"nodes": g.vcount(), "edges": g.ecount(), "similar": kinds.count("similar"), "dataflow": kinds.count("dataflow")}


def load_graph(graph_dir: Path):
    with open(Path(graph_dir) / "graph.pickle", "rb") as fh:
        return pickle.load(fh)
