"""Discover stage figures: synthetic corpora with planted domains, ingest done -> domains saved.

    .venv/bin/python benchmarks/bench_discover.py                 # 1k, 3k, 10k, 30k fast + MiniLM on 1k + real corpora
    .venv/bin/python benchmarks/bench_discover.py --quick         # 1k and 3k fast, 3 repeats, no MiniLM
    .venv/bin/python benchmarks/bench_discover.py --sizes 1000 --minilm-n 0 --repeats 1
    .venv/bin/python benchmarks/bench_discover.py --real WS       # the real-corpora row from WS/corpus/tools.parquet

Results: benchmarks/results/discover.{json,md} (benchmarks/results_io).

Each measurement runs `tasks.discover.domains.discover` in a fresh subprocess (so peak RSS is that run's),
starting from corpus/tools.parquet. "cold" = first run in the workspace; "forced" = the same
inputs again with force=True (a warm MiniLM cache; the fast vectors are always recomputed);
"skip" = the same inputs without force (the stage sees its output is current). Reports medians
over --repeats, plus purity / completeness against the planted domains. Every mode also scores the
labelled corpus of real tools (tests/data/labelled_tools.json: tau2 + BFCL, hand-labelled domains) with
the fast and the MiniLM embedding (in-process, a few seconds), and the full mode (or --real) runs the
stage on a real workspace's ingested corpora (BFCL + tau2 + NESTFUL): tools, domains, modularity, time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import Anchor, Figure, Recorder, export_tree, p99, short_sha  # noqa: E402

VERBS = ["get", "list", "create", "update", "delete", "search", "cancel", "book", "check", "set"]


def _words(n: int, seed: int) -> list[str]:
    """Whole lowercase words from MiniLM's vocabulary (real words, so embeddings mean something)."""
    from tasks.discover.embed import model_dir

    vocab = [w.strip() for w in (model_dir() / "vocab.txt").read_text().splitlines()]
    words = sorted({w for w in vocab if w.isalpha() and w.isascii() and 4 <= len(w) <= 10})
    random.Random(seed).shuffle(words)
    return words[:n]


def synthetic_tools(n: int, seed: int = 0, domain_size: int = 20):
    """n tools in n/domain_size planted domains; a domain = 3 entities and 8 attributes drawn from
    one word pool; each tool ~5 parameters, returns its entity's fields (so data-flow edges exist)."""
    from agentscaler.models import Tool

    rng = random.Random(seed)
    n_dom = max(1, n // domain_size)
    words = _words(20000, seed)
    tools, labels = [], []
    for d in range(n_dom):
        pool = rng.sample(words, 11)
        entities, attrs = pool[:3], pool[3:]
        size = domain_size if d < n_dom - 1 else n - domain_size * (n_dom - 1)
        for k in range(size):
            ent = entities[k % 3]
            verb = VERBS[(k // 3) % len(VERBS)]
            chosen = rng.sample(attrs, 4)
            props = {f"{ent}_id": {"type": "string", "description": f"The id of the {ent}."}}
            for a in chosen:
                props[a] = {"type": rng.choice(["string", "integer", "number", "boolean"]),
                            "description": f"The {a} of the {ent}."}
            req = [f"{ent}_id"] if verb not in ("create", "list", "search") else chosen[:1]
            returns = {"type": "object", "title": ent,
                       "properties": {f"{ent}_id": {"type": "string"}, **{a: {"type": "string"} for a in chosen[:2]}}}
            name = f"{verb}_{ent}_{d}_{k}"[:64]
            tools.append(Tool(name=name, source_name=name, source="synthetic", description=f"{verb.capitalize()} a {ent} "
                              f"with its {chosen[0]} and {chosen[1]}.", parameters={"type": "object", "properties": props,
                              "required": req}, returns=returns).with_id())
            labels.append(d)
    return tools, labels


CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from agentscaler.workspace import Workspace
from tasks.discover.config import DiscoverConfig
from tasks.discover.discover import discover
from tasks.environments.plan import tool_reading
t = time.perf_counter()
# as `agentscaler discover` runs it: reads shared with the writes they observe (tasks.discover.observers)
s = discover(Workspace({ws!r}), cfg=DiscoverConfig(embedding={emb!r}), force={force!r}, draw=True, reading=tool_reading)
s["wall_s"] = time.perf_counter() - t
# VmHWM: this process image's own peak (ru_maxrss survives execve, so it would carry the parent's size at fork)
s["peak_rss_mib"] = int(next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")).split()[1]) / 1024
print("RESULT" + json.dumps(s))
"""


def run_child(ws: Path, emb: str, force: bool, root: Path = ROOT) -> dict:
    """The stage in a fresh process, on the code under `root` (this tree, or --before's)."""
    code = CHILD.format(root=str(root), ws=str(ws), emb=emb, force=force)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                              "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "true"})
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def quality(ws: Path, tools, labels) -> dict:
    from tasks.discover.domains import score_partition

    records = json.loads((ws / "graph" / "domains.json").read_text())
    lab = {t.id: str(l) for t, l in zip(tools, labels)}
    s = score_partition(records, lab)
    return {k: s[k] for k in ("purity", "completeness_min", "completeness_mean", "n_domains")}


LABELLED = ROOT / "tests" / "data" / "labelled_tools.json"


def labelled_quality(emb: str) -> dict:
    """Purity / completeness / modularity of the stage's domains on the hand-labelled real tools ("core" set)."""
    from agentscaler.models import Tool
    from tasks.discover.config import DiscoverConfig
    from tasks.discover.domains import find_domains, score_partition
    from tasks.discover.embed import embed_tools
    from tasks.discover.graph import build_graph

    rows = [r for r in json.loads(LABELLED.read_text()) if r["set"] == "core"]
    tools = [Tool.model_validate(r["tool"]).with_id() for r in rows]
    cfg = DiscoverConfig(embedding=emb).resolved()
    vecs, _ = embed_tools(tools, cfg.embedding)
    records, report = find_domains(tools, vecs, build_graph(tools, vecs, cfg.threshold, cfg.top_k, cfg.flow_min_sim),
                                   cfg)
    score = score_partition(records, {t.id: r["label"] for t, r in zip(tools, rows)})
    return {"embedding": emb, "tools": len(tools), "labels": len({r["label"] for r in rows}),
            "modularity": report.get("modularity"), **score}


def real_corpora(ws_root: Path) -> dict:
    """The stage on a real workspace's ingested corpora, cold then warm, in a copy (the workspace is not written)."""
    from agentscaler.workspace import Workspace

    src = Workspace(ws_root).tools_path
    with tempfile.TemporaryDirectory() as d:
        ws = Workspace(Path(d) / "ws")
        shutil.copy(src, ws.tools_path)
        a = run_child(ws.root, "fast", force=False)
        c = run_child(ws.root, "fast", force=False)
    return {"tools": a["tools"], "domains": a["domains"], "modularity": a["modularity"], "cold_s": round(a["wall_s"], 2),
            "skip_s": round(c["wall_s"], 2), "peak_rss_mib": round(a["peak_rss_mib"]), "source": str(ws_root)}


def bench(n: int, emb: str, repeats: int, before: Path | None = None) -> dict:
    """Cold, forced and warm runs on n synthetic tools; with `before` (an older tree), its cold and
    warm runs on the same corpus beside each repeat."""
    from agentscaler.artifacts import save_tools
    from agentscaler.workspace import Workspace

    tools, labels = synthetic_tools(n)
    cold, forced, skip, rss, parts = [], [], [], [], []
    old_cold, old_skip = [], []
    q: dict = {}
    edges: dict = {}
    for _ in range(repeats):
        if before is not None:
            with tempfile.TemporaryDirectory() as d:
                ws = Workspace(Path(d) / "ws")
                save_tools(ws.tools_path, tools)
                old_cold.append(run_child(ws.root, emb, force=False, root=before)["wall_s"])
                old_skip.append(run_child(ws.root, emb, force=False, root=before)["wall_s"])
        with tempfile.TemporaryDirectory() as d:
            ws = Workspace(Path(d) / "ws")
            save_tools(ws.tools_path, tools)
            a = run_child(ws.root, emb, force=False)
            b = run_child(ws.root, emb, force=True)
            c = run_child(ws.root, emb, force=False)
            cold.append(a["wall_s"]); forced.append(b["wall_s"]); skip.append(c["wall_s"])
            rss.append(max(a["peak_rss_mib"], b["peak_rss_mib"]))
            parts.append(a["timings"])
            q = quality(ws.root, tools, labels)
            edges = a["edges"]
    med = statistics.median
    return {"tools": n, "embedding": emb, "cold_s": round(med(cold), 2), "forced_s": round(med(forced), 2),
            "skip_s": round(med(skip), 2), "peak_rss_mib": round(max(rss)),
            "cold_p99_s": round(p99(cold), 2), "skip_p99_s": round(p99(skip), 2), "repeats": repeats,
            "cold_parts": {k: round(med(p[k] for p in parts), 2) for k in parts[0]}, "edges": edges, **q,
            **({"before_cold_s": round(med(old_cold), 2), "before_skip_s": round(med(old_skip), 2)} if old_cold else {})}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=None, help="default 1000,3000,10000,30000 (--quick: 1000,3000)")
    ap.add_argument("--minilm-n", type=int, default=None, help="MiniLM sample size (0: skip; default 1000, --quick 0)")
    ap.add_argument("--real", default=None, help="a workspace with ingested real corpora (default in full mode: "
                                                 "$AGENTSCALER_BENCH_WORKSPACE or ./workspace, if it has them)")
    ap.add_argument("--repeats", type=int, default=None, help="default 1 (--quick: 3)")
    ap.add_argument("--quick", action="store_true", help="bounded run: 1k and 3k tools, fast embedding only")
    ap.add_argument("--before", default=None, help="a git ref: its cold and warm runs beside this tree's, same corpora")
    args = ap.parse_args()
    before_dir = tempfile.TemporaryDirectory() if args.before else None
    before = export_tree(args.before, Path(before_dir.name)) if before_dir else None
    before_label = short_sha(args.before) if args.before else None
    sizes = args.sizes or ("1000,3000" if args.quick else "1000,3000,10000,30000")
    minilm_n = args.minilm_n if args.minilm_n is not None else (0 if args.quick else 1000)
    repeats = args.repeats or (3 if args.quick else 1)
    real = args.real or (None if args.quick else os.environ.get("AGENTSCALER_BENCH_WORKSPACE", "workspace"))
    real_ws = Path(real) if real and (Path(real) / "corpus" / "tools.parquet").exists() else None
    rows = []
    with Recorder("discover") as rec:
        labelled = [labelled_quality(e) for e in ("fast", "minilm")]
        print("labelled", json.dumps(labelled), flush=True)
        real_row = real_corpora(real_ws) if real_ws else None
        print("real", json.dumps(real_row), flush=True)
        for n in sizes.split(","):
            rows.append(bench(int(n), "fast", repeats, before))
            print("done", json.dumps(rows[-1]), flush=True)
        if minilm_n:
            rows.append(bench(minilm_n, "minilm", 1))
            print("done", json.dumps(rows[-1]), flush=True)
    if before_dir:
        before_dir.cleanup()
    workload = ("fixture: bench_discover.synthetic_tools (planted domains of 20 tools), from corpus/tools.parquet"
                + ("; --quick: 1k and 3k only" if args.quick else ""))
    for r in rows:
        big = r["tools"] >= 30000 and r["embedding"] == "fast"
        old = ({"anchor": Anchor(value=r["before_cold_s"], unit="s", kind="measured",
                                 source=f"git {args.before} ({before_label}), same corpus, same run"),
                "ratio_to_anchor": round(r["cold_s"] / r["before_cold_s"], 3)} if r.get("before_cold_s") else {})
        rec.figures.append(Figure(name=f"discover cold, {r['tools']:,} tools ({r['embedding']} embedding)",
                                  value=r["cold_s"], unit="s", workload=workload, median=r["cold_s"],
                                  p99=r["cold_p99_s"], aim="<= 30 s at 30k (issue 20 aim 6)" if big else None,
                                  meets_aim=r["cold_s"] <= 30 if big else None, **old))
        rec.figures.append(Figure(name=f"discover warm (unchanged corpus), {r['tools']:,} tools ({r['embedding']})",
                                  value=r["skip_s"], unit="s", workload=workload, median=r["skip_s"], p99=r["skip_p99_s"],
                                  ratio_to_anchor=round(r["skip_s"] / r["cold_s"], 3) if r["cold_s"] else None,
                                  anchor=Anchor(value=r["cold_s"], unit="s", kind="measured",
                                                source="the cold run on the same corpus, same run"),
                                  aim="<= 5 s at 30k (issue 20 aim 6)" if big else None,
                                  meets_aim=r["skip_s"] <= 5 if big else None))
        rec.figures.append(Figure(name=f"discover peak RSS, {r['tools']:,} tools ({r['embedding']})",
                                  value=round(r["peak_rss_mib"] / 1024, 2), unit="GiB", workload=workload,
                                  aim="< 4 GiB at 30k (issue 20 aim 6)" if big else None,
                                  meets_aim=r["peak_rss_mib"] < 4096 if big else None))
        if r["embedding"] == "minilm":  # forced = the same inputs again with the embedding cache warm
            rec.figures.append(Figure(name=f"discover forced, warm embedding cache, {r['tools']:,} tools (minilm)",
                                      value=r["forced_s"], unit="s", workload=workload,
                                      ratio_to_anchor=round(r["forced_s"] / r["cold_s"], 3) if r["cold_s"] else None,
                                      anchor=Anchor(value=r["cold_s"], unit="s", kind="measured",
                                                    source="the cold run (empty cache) on the same corpus, same run")))
    for q in labelled:
        rec.figures.append(Figure(name=f"discover purity, labelled real tools ({q['embedding']} embedding)",
                                  value=q["purity"], unit="", workload=f"real: tests/data/labelled_tools.json core set, "
                                  f"{q['tools']} tau2 + BFCL tools in {q['labels']} hand-labelled domains",
                                  aim=">= 0.85", meets_aim=q["purity"] >= 0.85))
    if real_row:
        rec.figures.append(Figure(name=f"discover, real corpora: {real_row['tools']:,} tools -> {real_row['domains']} "
                                       f"domains (modularity {real_row['modularity']})", value=real_row["cold_s"],
                                  unit="s", workload="real: BFCL + tau2 + NESTFUL as ingested (corpus/tools.parquet), "
                                  "cold, fast embedding, fresh process"))
        rec.figures.append(Figure(name="discover warm (unchanged corpus), real corpora", value=real_row["skip_s"],
                                  unit="s", workload="real: BFCL + tau2 + NESTFUL as ingested, fast embedding",
                                  ratio_to_anchor=round(real_row["skip_s"] / real_row["cold_s"], 3),
                                  anchor=Anchor(value=real_row["cold_s"], unit="s", kind="measured",
                                                source="the cold run on the same corpus, same run")))
    rec.notes = [f"medians over {repeats} repeat(s), each in a fresh subprocess, timed from the stage's call to its "
                 "return (the corpus read, embedding, graph, domains, shared reads as `agentscaler discover` runs "
                 "them, the files and the drawing; not the interpreter's start and imports); warm = the same inputs "
                 "again, which the stage finds current"]
    if before_label:
        rec.notes.append(f"before = git {args.before} ({before_label}): its cold and warm runs on each synthetic "
                         f"corpus, beside this tree's, same run: "
                         + "; ".join(f"{r['tools']:,}: cold {r['before_cold_s']} s vs {r['cold_s']} s, warm "
                                     f"{r['before_skip_s']} s vs {r['skip_s']} s" for r in rows if "before_cold_s" in r))
    lines = ["| tools | embedding | cold s (median / p99) | forced s | warm s (median / p99) | peak RSS MiB | purity | "
             "completeness min | domains | edges similar/dataflow | cold parts |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tools']:,} | {r['embedding']} | {r['cold_s']} / {r['cold_p99_s']} | {r['forced_s']} | "
                     f"{r['skip_s']} / {r['skip_p99_s']} | {r['peak_rss_mib']} | {r['purity']} | "
                     f"{r['completeness_min']} | {r['n_domains']} | {r['edges']['similar']}/{r['edges']['dataflow']} | "
                     f"{r['cold_parts']} |")
    lines += ["", "Labelled real tools (tests/data/labelled_tools.json, core set):", "",
              "| embedding | tools | labels | purity | completeness min / mean | domains | modularity |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {q['embedding']} | {q['tools']} | {q['labels']} | {q['purity']} | {q['completeness_min']} / "
              f"{q['completeness_mean']} | {q['n_domains']} | {q['modularity']} |" for q in labelled]
    if real_row:
        lines += ["", f"Real corpora ({real_row['source']}): {real_row['tools']:,} tools -> {real_row['domains']} domains, "
                  f"modularity {real_row['modularity']}, cold {real_row['cold_s']} s, warm {real_row['skip_s']} s, "
                  f"peak RSS {real_row['peak_rss_mib']} MiB"]
    fast = {r["tools"]: r for r in rows if r["embedding"] == "fast"}
    for r in rows:
        if r["embedding"] == "minilm" and 30000 in fast:
            per_tool = r["cold_parts"]["embed_s"] / r["tools"]
            est = 30000 * per_tool + fast[30000]["cold_s"] - fast[30000]["cold_parts"]["embed_s"]
            lines += ["", f"MiniLM at 30k, extrapolated from {r['tools']} (embed time linear in tools): ~{est:.0f} s cold"]
    print(rec.write("\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in rec.notes) + "\n"))


if __name__ == "__main__":
    main()
