"""The discover stage: tools -> vectors -> tool graph -> domains -> graph/domains.json.

tools (corpus/tools.parquet) -> vectors (tasks.discover.embed) -> graph (tasks.discover.graph:
graph.pickle, edges.parquet) -> domains (tasks.discover.domains, with the dependency check of
tasks.discover.check; optionally the LLM check) -> reads shared with the writes they observe
(tasks.discover.observers, when given how a tool reads) -> graph/domains.json, graph/report.json,
reports/domains.png. A re-run with the same tools and config is skipped.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import igraph as ig
import numpy as np

from agentscaler import progress
from agentscaler.artifacts import load_tools
from agentscaler.hashing import content_hash
from agentscaler.models import Tool
from agentscaler.plots import pyplot, save_png
from agentscaler.workspace import Workspace, atomic_write_bytes, atomic_write_json
from tasks.discover.config import DiscoverConfig
from tasks.discover.current import current_report, file_key as corpus_file_key
from tasks.discover.domains import domain_id, find_domains
from tasks.discover.embed import embed_tools
from tasks.discover.graph import build_graph, save_graph
from tasks.discover.observers import Reading, share_reads

# Reading every tool (tool_reading plans each on its own, ~0.3 ms a tool) is discovery's longest
# step at 30k tools (9 s): from this many tools on, and with a second CPU, it runs in a process of
# its own while this one embeds, builds the graph and finds the communities (bench_discover, side
# by side: 17.7 s vs 20.5 s cold at 30k tools; at 10k as fast as before, 7.9 s: the process's start
# and imports eat the gain, hence no lower)
BACKGROUND_READINGS = 10_000


def discover(ws: Workspace, tools: list[Tool] | None = None, cfg: DiscoverConfig | None = None,
             force: bool = False, draw: bool = True, checker: Any = None,
             reading: Reading | None = None) -> dict[str, Any]:
    """The whole stage on plain functions: tools (default corpus/tools.parquet) -> graph/domains.json.

    Skips the work when graph/report.json already records the same tools and config (unless force).
    `checker`: a second check after the rules' (tasks.discover.check.LLMDependencyChecker); its
    cost (requests, tokens, seconds) goes into the summary as "llm_check".
    `reading`: how a tool reads (kind, entity; tasks.environments.plan.tool_reading): a domain whose
    writes change an entity none of its reads is about then gets the corpus's reads about it
    (tasks.discover.observers); None skips that step.
    """
    cfg = (cfg or DiscoverConfig()).resolved()
    t0 = time.perf_counter()
    report_path = ws.graph_dir / "report.json"
    # A run on the workspace's corpus file is also keyed by the file's bytes: an unchanged corpus is
    # recognised without reading 30k tools into objects (issue 20 aim 6: warm discovery in seconds).
    file_key = None
    if tools is None:
        file_key = corpus_file_key(ws, cfg, checker)
        old = current_report(ws, report_path, force)
        if old is not None and old.get("file_key") == file_key:
            return {**old["summary"], "skipped": True}
        tools = load_tools(ws.tools_path)
    tools = [t if t.id else t.with_id() for t in tools]
    key: dict[str, Any] = {"tools": sorted(t.id for t in tools), "config": cfg.model_dump()}
    if checker is not None:  # a second (LLM) check gives other domains: never reuse a rules-only run
        key["checker"] = type(checker).__name__
    if reading is not None:
        key["share_reads"] = True
    input_hash = content_hash(key)
    old = current_report(ws, report_path, force)
    if old is not None and old.get("input_hash") == input_hash:
        return {**old["summary"], "skipped": True}
    timings = {}
    with _readings(reading, tools, ws.tools_path if file_key else None) as readings, \
            progress.stage("discover", total=4, unit="steps") as bar:
        t = time.perf_counter()
        bar.advance(0, note=f"embed {len(tools)} tools")
        vecs, estats = embed_tools(tools, cfg.embedding, ws.cache_dir, cfg.param_weight)
        timings["embed_s"] = time.perf_counter() - t
        t = time.perf_counter()
        bar.advance(note="tool graph")
        g = build_graph(tools, vecs, cfg.threshold, cfg.top_k, cfg.flow_min_sim)
        gstats = save_graph(g, ws.graph_dir)
        timings["graph_s"] = time.perf_counter() - t
        t = time.perf_counter()
        bar.advance(note="domains" + (" + dependency check" if checker is not None else ""))
        records, dreport = find_domains(tools, vecs, g, cfg, checker=checker)
        if checker is not None and hasattr(checker, "stats"):
            dreport["second_check"] = {"checker": type(checker).__name__, **checker.stats}
        if reading is not None:
            records, dreport["shared_reads"] = share_reads(records, tools, vecs, g, reading, domain_id,
                                                           max_size=cfg.max_size, known=_result(readings))
        timings["domains_s"] = time.perf_counter() - t
        atomic_write_json(ws.domains_path, records)
        t = time.perf_counter()
        bar.advance(note="drawing")
        if draw:
            png = draw_domains(records, g, tools, ws.reports_dir / "domains.png")
            atomic_write_bytes(ws.graph_dir / "domains.png", png.read_bytes())
        timings["draw_s"] = time.perf_counter() - t
        bar.advance(note=f"{len(records)} domains")
    timings["total_s"] = time.perf_counter() - t0
    timings = {k: round(v, 3) for k, v in timings.items()}
    summary = {"tools": len(tools), "domains": len(records), "kept_tools": sum(len(r["tools"]) for r in records),
               "dropped": dreport["dropped"], "modularity": dreport["modularity"],
               "shared_reads": dreport.get("shared_reads"), "edges": gstats, "embedding": estats, "timings": timings,
               "skipped": False}
    if checker is not None and hasattr(checker, "stats"):
        summary["llm_check"] = dict(checker.stats)
    atomic_write_json(report_path, {"input_hash": input_hash, "file_key": file_key, "config": cfg.model_dump(),
                                    "summary": summary, **dreport})
    return summary


@contextmanager
def _readings(reading: Reading | None, tools: list[Tool], path: Path | None) -> Iterator[Future | None]:
    """Every tool's reading, computed in a spawned process (the future of it), when it pays
    (BACKGROUND_READINGS): the process reads the corpus from `path` itself when given (unpickling
    30k tools costs as much as reading them, and pickling them would cost this process), else it
    gets `tools`. None: share_reads reads each tool here."""
    if reading is None or len(tools) < BACKGROUND_READINGS or len(os.sched_getaffinity(0)) < 2:
        yield None
        return
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        job = pool.submit(all_readings, reading, None if path is not None else tools,
                          str(path) if path is not None else None)
        try:
            yield job
        finally:
            job.cancel()


def _result(job: Future | None) -> list[tuple[str, str]] | None:
    """The background readings, or None (none started, or the process failed: share_reads then
    reads each tool itself, so a lost process costs time, never the step)."""
    try:
        return job.result() if job is not None else None
    except Exception:  # noqa: BLE001 - e.g. BrokenProcessPool
        return None


def all_readings(reading: Reading, tools: list[Tool] | None, path: str | None) -> list[tuple[str, str]]:
    """How each tool reads, in order (the tools of `path` when tools is None: a reading does not
    depend on a tool's id, so they need none)."""
    return [reading(t) for t in (tools if tools is not None else load_tools(Path(path or "")))]


def draw_domains(records: list[dict], g, tools: list[Tool], path: Path, max_domains: int = 150) -> Path:
    """PNG of the domain graph: one node per domain (area ~ tools), edges = cross-domain links."""
    plt = pyplot()
    top = records[:max_domains]
    where = {}
    for ci, r in enumerate(top):
        for tid in r["tools"]:
            where[tid] = ci
    ids = g.vs["tool_id"] if g.vcount() else []
    links: Counter = Counter()
    for a, b in g.get_edgelist():
        ca, cb = where.get(ids[a]), where.get(ids[b])
        if ca is not None and cb is not None and ca != cb:
            links[(min(ca, cb), max(ca, cb))] += 1
    dg = ig.Graph(n=len(top), edges=list(links), directed=False)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 7), gridspec_kw={"width_ratios": [3, 1]})
    if len(top):
        random.seed(0)
        coords = np.asarray(dg.layout_fruchterman_reingold(seed=None) if dg.ecount() else dg.layout_circle().coords)
        coords = np.asarray(coords, float).reshape(len(top), 2)
        for (a, b), c in links.items():
            ax.plot(coords[[a, b], 0], coords[[a, b], 1], color="0.7", lw=min(0.3 + 0.2 * c, 3), zorder=1)
        sizes = np.asarray([len(r["tools"]) for r in top])
        ax.scatter(coords[:, 0], coords[:, 1], s=20 + 15 * sizes, c=np.arange(len(top)), cmap="tab20", zorder=2,
                   edgecolors="k", linewidths=0.5)
        for ci, r in enumerate(top[:30]):
            ax.annotate(f"{r['names'][0][:18]} (+{len(r['names']) - 1})", coords[ci], fontsize=7, zorder=3)
    ax.set_title(f"{len(records)} domains ({len(top)} largest shown): node area ~ tools, edges = cross-domain links")
    ax.axis("off")
    hist = Counter(len(r["tools"]) for r in records)
    ax2.bar(list(hist), list(hist.values()))
    ax2.set_xlabel("tools per domain")
    ax2.set_ylabel("domains")
    return save_png(fig, path, dpi=90)
