"""Ingest figures: all of BFCL + tau2 + NESTFUL, and a synthetic 30,000-tool ToolBench corpus.

Each run is a fresh subprocess (so peak RSS is that run's own) on a fresh workspace; medians of
--repeat runs. Usage: .venv/bin/python benchmarks/bench_ingest.py [--quick] [--repeat 3] [--tools 30000]
(--quick: one run each, a 3,000-tool synthetic corpus.)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_io import Figure, Recorder  # noqa: E402

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from agentscaler.workspace import Workspace
from tasks.corpus.ingest import ingest
t1 = time.perf_counter()
report = ingest(Workspace(sys.argv[1]), sys.argv[2:])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "ingest_s": t2 - t1, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "accepted": report["accepted"], "rejected": report["rejected"], "sources": report["sources"]}))
"""

WORDS = ("user order flight hotel weather stock price city country movie song album artist team player match "
         "recipe ingredient book author account payment invoice ticket event venue product review rating").split()
TYPES = ["STRING", "NUMBER", "BOOLEAN", "ENUM", "DATE (YYYY-MM-DD)", "STRING", "STRING", "OBJECT", "ARRAY"]


def synth_toolbench(dest: Path, n_tools: int, per_file: int = 10, seed: int = 0) -> None:
    """n_tools APIs in ToolBench's tool-file format, ~2% duplicates and ~2% low-quality ones."""
    rng = random.Random(seed)
    n_files = n_tools // per_file
    for f in range(n_files):
        cat = dest / f"Category{f % 49}"
        cat.mkdir(parents=True, exist_ok=True)
        apis = []
        for a in range(per_file):
            w = rng.sample(WORDS, 3)
            params = [{"name": f"{rng.choice(WORDS)}_{k}", "type": rng.choice(TYPES),
                       "description": f"The {rng.choice(WORDS)} {rng.choice(WORDS)} to use.", "default": ""}
                      for k in range(rng.randint(0, 6))]
            r = rng.random()
            desc = "" if r < 0.02 else f"Get the {w[0]} {w[1]} of a {w[2]} (api {f}.{a})."
            if r > 0.98 and apis:
                apis.append(dict(apis[-1]))  # a duplicate API
                continue
            cut = rng.randint(0, len(params))
            apis.append({"name": f"get_{w[0]}_{w[1]}_{a}", "url": f"https://api{f}.example/{a}", "description": desc,
                         "method": "GET", "required_parameters": params[:cut], "optional_parameters": params[cut:]})
        (cat / f"tool_{f}.json").write_text(json.dumps({"tool_name": f"Tool {f}", "tool_description": "A synthetic tool.",
                                                         "api_list": apis}))


def run(ws: Path, sources: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(ws), *sources], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(label: str, sources: list[str], repeat: int) -> dict:
    rows = []
    for i in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            r = run(Path(tmp) / "ws", sources)
            r["wall_s"] = time.perf_counter() - t
            rows.append(r)
    med = {k: statistics.median(r[k] for r in rows) for k in ("wall_s", "ingest_s", "import_s", "peak_rss_mib")}
    print(f"{label:<28} wall {med['wall_s']:6.2f} s  ingest {med['ingest_s']:6.2f} s  import {med['import_s']:4.2f} s  "
          f"peak RSS {med['peak_rss_mib']:7.0f} MiB  accepted {rows[0]['accepted']}  rejected {rows[0]['rejected']}")
    return {**med, "accepted": rows[0]["accepted"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one run each; 3,000 synthetic tools")
    ap.add_argument("--repeat", type=int, default=None, help="default 3 (quick 1)")
    ap.add_argument("--tools", type=int, default=None, help="default 30000 (quick 3000)")
    args = ap.parse_args()
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.tools = args.tools or (3000 if args.quick else 30000)
    from agentscaler.corpora import fetch

    with Recorder("ingest") as rec:
        for name in ("bfcl", "tau2", "nestful"):
            fetch(name)
        print(f"medians of {args.repeat} runs, each a fresh process and workspace")
        real = {n: bench(n, [n], args.repeat) for n in ("bfcl", "tau2", "nestful")}
        allr = bench("bfcl+tau2+nestful", ["bfcl", "tau2", "nestful"], args.repeat)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            synth_toolbench(Path(tmp) / "toolbench", args.tools)
            print(f"(generated {args.tools} ToolBench APIs in {time.perf_counter() - t:.1f} s)")
            syn = bench(f"synthetic toolbench {args.tools}", [str(Path(tmp) / "toolbench")], args.repeat)
        print(f"sum of separate real corpora / together: {sum(r['ingest_s'] for r in real.values()) / allr['ingest_s']:.2f}x; "
              f"synthetic: {syn['accepted'] / syn['ingest_s']:.0f} tools/s, real: {allr['accepted'] / allr['ingest_s']:.0f} tools/s")
        print(f"targets: real < 10 s -> {'ok' if allr['wall_s'] < 10 else 'MISSED'}; synthetic < 20 s -> "
              f"{'ok' if syn['wall_s'] < 20 else 'MISSED'}; peak < 2048 MiB -> {'ok' if syn['peak_rss_mib'] < 2048 else 'MISSED'}")
    med = f"median of {args.repeat} fresh processes" if args.repeat > 1 else "one fresh process (quick)"
    real_wl = f"real: BFCL + tau2 + NESTFUL, {allr['accepted']} tools kept, {med}"
    syn_wl = f"fixture: synthetic ToolBench-format corpus, {args.tools} tools, {med}"
    rec.figures += [
        Figure(name="ingest, real corpora, wall (process start to end)", value=allr["wall_s"], unit="s",
               workload=real_wl, aim="< 10 s", meets_aim=allr["wall_s"] < 10),
        Figure(name="ingest, real corpora, peak RSS", value=allr["peak_rss_mib"], unit="MiB", workload=real_wl),
        Figure(name=f"ingest, {args.tools} synthetic tools, wall", value=syn["wall_s"], unit="s", workload=syn_wl,
               aim="30k: < 20 s" if args.tools >= 30000 else None,
               meets_aim=syn["wall_s"] < 20 if args.tools >= 30000 else None),
        Figure(name=f"ingest, {args.tools} synthetic tools, peak RSS", value=syn["peak_rss_mib"], unit="MiB",
               workload=syn_wl, aim="< 2 GiB", meets_aim=syn["peak_rss_mib"] < 2048),
    ]
    rec.write("\n".join(f"- {f.name}: {f.value:.2f} {f.unit} ({f.workload})" for f in rec.figures))


if __name__ == "__main__":
    main()
