"""The build's cost per domain (issue 20 aim 1): CPU of the orchestrator and of the sandbox
processes, wall, sandbox round trips and fresh sandbox children, per domain.

    .venv/bin/python benchmarks/bench_build_cpu.py --quick               # 8 domains of the 1k corpus
    .venv/bin/python benchmarks/bench_build_cpu.py                       # 40 domains
    .venv/bin/python benchmarks/bench_build_cpu.py --before main --work DIR [--profile]

The corpus is bench_scale's synthetic 1k-tool ToolBench corpus, ingested and discovered once
(`agentscaler ingest`, `discover`) in --work. Each arm then builds the same first N domains (rules
synthesis, validation, 10 scenarios per domain) in a fresh copy of that workspace, one domain after
another in one process (flows.build_worker.build_batch: what a pool process of `agentscaler build`
runs, without Prefect), in a subprocess of its own. Wall time on a loaded machine says little, so the
figures are CPU seconds: the orchestrating process's own (time.process_time) and the sandbox
processes' (utime+stime+cutime+cstime of every process under each worker's bubblewrap, read from
/proc just before the worker is stopped: sandbox children reaped by the zygote are in its cutime).
--before REF: the same build by git REF's code (exported with `git archive`), run first, then this
tree's, alternating `--repeat` times; the ratios are this tree / REF per domain.
--profile: a cProfile of this tree's orchestrator (CPU time: time spent waiting on the sandbox is
not counted), top functions by own time, into the markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import Anchor, Figure, Recorder, export_tree, short_sha, tree_cpu_s  # noqa: E402

LAYERS = ["sandbox: bubblewrap uid/net/pid/fs namespaces, seccomp, rlimits, clean environment, landlock",
          "validation of every tool in the sandbox (signature, execution, state change, read purity, quality)",
          "scenarios: gold execution of each walk from the seed (a restarted episode: new connection, tools.py "
          "afresh, scratch emptied), each kept scenario replayed for determinism in a child that ran no walk"]


def prepare(work: Path, tools: int = 1000) -> Path:
    """work/ws0: the corpus ingested and discovered (once; reused when present)."""
    ws0 = work / "ws0"
    if (ws0 / "graph" / "domains.json").exists():
        return ws0
    from bench_scale import cli, write_corpus
    corpus = work / f"corpus{tools}"
    if not corpus.exists():
        write_corpus(corpus, tools)
    for args in (("ingest", str(corpus)), ("discover",)):
        subprocess.run([*cli(ROOT), "-w", str(ws0), "-q", *args, "--json"], check=True, capture_output=True)
    return ws0


# --- the child: one arm's build, measured ---------------------------------------------------------
def child(code_root: Path, ws: Path, n: int, per_domain: int, profile: Path | None) -> None:
    """Build the first n domains of ws with the code under code_root; print the measures as JSON."""
    sys.path.insert(0, str(code_root))
    import cProfile
    import pstats
    import time

    from envs import sandbox
    from flows.build_worker import build_batch

    counts = {"round_trips": 0, "fresh_children": 0, "workers": 0, "sandbox_cpu_s": 0.0, "scan_cpu_s": 0.0}
    send, fresh, kill, start = (sandbox.WorkerProcess._send_request, sandbox.WorkerProcess.fresh,
                                sandbox.WorkerProcess.kill, sandbox.WorkerProcess.start)

    def _send(self, *a, **k):
        counts["round_trips"] += 1
        return send(self, *a, **k)

    def _fresh(self, *a, **k):
        counts["fresh_children"] += 1
        return fresh(self, *a, **k)

    def _start(self, *a, **k):
        counts["workers"] += 1
        return start(self, *a, **k)

    def _kill(self, *a, **k):
        if self.proc is not None and self.proc.pid is not None:  # a worker in a sandbox of its own
            c0 = time.process_time()
            counts["sandbox_cpu_s"] += tree_cpu_s([self.proc.pid])
            counts["scan_cpu_s"] += time.process_time() - c0
        return kill(self, *a, **k)

    sandbox.WorkerProcess._send_request, sandbox.WorkerProcess.fresh = _send, _fresh
    sandbox.WorkerProcess.kill, sandbox.WorkerProcess.start = _kill, _start
    launcher_close = getattr(sandbox, "Launcher", None) and sandbox.Launcher.close

    def _close_launcher(self, *a, **k):
        if self.proc is not None:  # the shared launcher's bubblewrap: every worker it forked (REF may have none)
            c0 = time.process_time()
            counts["sandbox_cpu_s"] += tree_cpu_s([self.proc.pid])
            counts["scan_cpu_s"] += time.process_time() - c0
            counts["launcher_workers"] = counts.get("launcher_workers", 0) + self.opened
        return launcher_close(self, *a, **k)

    if launcher_close:
        sandbox.Launcher.close = _close_launcher
    domains = [str(r["domain"]) for r in json.loads((ws / "graph" / "domains.json").read_text())][:n]
    prof = cProfile.Profile(time.process_time) if profile else None  # CPU, not wall: waits are not work
    c0, t0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    results, failures = build_batch(str(ws), domains, "rules", 0, per_domain, 4)
    if prof:
        prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0 - counts["scan_cpu_s"]
    if prof:
        with open(profile, "w") as fh:
            pstats.Stats(prof, stream=fh).sort_stats("tottime").print_stats(25)
            pstats.Stats(prof, stream=fh).sort_stats("cumulative").print_stats(45)
    scen = [json.loads(x) for d in results for x in (ws / "domains" / d / "scenarios.jsonl").read_text().splitlines()]
    print(json.dumps({"domains": len(domains), "built": len(results), "failed": len(failures),
                      "scenarios": len(scen), "scenario_ids": sorted(s["id"] for s in scen),
                      "executes": sum(r["executes"] or 0 for r in results.values()),
                      "wall_s": wall, "orchestrator_cpu_s": cpu, **counts}))


# --- the parent: arms side by side -----------------------------------------------------------------
def arm(code_root: Path, ws0: Path, into: Path, n: int, per_domain: int, profile: Path | None = None) -> dict:
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for sub in ("corpus", "graph"):
        shutil.copytree(ws0 / sub, into / sub)
    load = round(os.getloadavg()[0], 2)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(code_root), "--ws", str(into), "-n", str(n),
           "--per-domain", str(per_domain)] + (["--profile-out", str(profile)] if profile else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=code_root)
    if out.returncode != 0:
        raise RuntimeError(f"build arm {code_root} exited {out.returncode}: {out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    shutil.rmtree(into, ignore_errors=True)
    return row | {"load": load}


def per_domain_row(r: dict) -> dict:
    d = max(1, r["built"])
    return {"orchestrator_cpu_s": r["orchestrator_cpu_s"] / d, "sandbox_cpu_s": r["sandbox_cpu_s"] / d,
            "cpu_s": (r["orchestrator_cpu_s"] + r["sandbox_cpu_s"]) / d, "wall_s": r["wall_s"] / d,
            "round_trips": r["round_trips"] / d, "fresh_children": r["fresh_children"] / d, "workers": r["workers"] / d}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 domains, one repeat")
    ap.add_argument("-n", type=int, default=None, help="domains to build (default 40, --quick 8)")
    ap.add_argument("--per-domain", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=None, help="arms run this many times each (default 2, --quick 1)")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--before", default=None, help="a git ref: the same build by its code, beside this tree's")
    ap.add_argument("--profile", action="store_true", help="cProfile this tree's orchestrator (one more run)")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ws", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    n = a.n or (8 if a.quick else 40)
    if a.child:
        child(a.child, a.ws, n, a.per_domain, a.profile_out)
        return
    repeat = a.repeat or (1 if a.quick else 2)
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-build-cpu-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        ws0 = prepare(work)
        arms = {"this tree": ROOT}
        label = None
        if a.before:
            label = short_sha(a.before)
            arms = {label: export_tree(a.before, work / "before-code"), **arms}
        with Recorder("build_cpu") as rec:
            runs: dict[str, list[dict]] = {k: [] for k in arms}
            for _ in range(repeat):
                for name, root in arms.items():  # the older code first, then this tree
                    runs[name].append(arm(root, ws0, work / "ws-run", n, a.per_domain))
            prof_text = ""
            if a.profile:
                arm(ROOT, ws0, work / "ws-run", n, a.per_domain, profile=work / "profile.txt")
                prof_text = (work / "profile.txt").read_text()
        med: dict[str, dict] = {}
        for name, rs in runs.items():
            rows = [per_domain_row(r) for r in rs]
            med[name] = {k: sorted(x[k] for x in rows)[len(rows) // 2] for k in rows[0]}
        mine = med["this tree"]
        workload = f"fixture: bench_scale's synthetic 1k-tool corpus, first {n} domains, {a.per_domain} scenarios each"
        for key, unit in (("cpu_s", "s"), ("orchestrator_cpu_s", "s"), ("sandbox_cpu_s", "s"), ("wall_s", "s"),
                          ("round_trips", "round trips"), ("fresh_children", "children")):
            old = med[label][key] if label else None
            rec.figures.append(Figure(
                name=f"build per domain: {key.replace('_', ' ')}", value=round(mine[key], 4), unit=unit,
                workload=workload, median=round(mine[key], 4),
                aim="~0.08 s per domain for 30k tools in <= 5 min (issue 20 aim 1)" if key == "wall_s" else None,
                anchor=Anchor(value=round(old, 4), unit=unit, kind="measured",
                              source=f"git {label}, same domains, same run") if old is not None else None,
                ratio_to_anchor=round(mine[key] / old, 3) if old else None))
        rec.layers = LAYERS
        rec.notes = ["CPU figures exclude the /proc scans that measure the sandbox's CPU",
                     "wall per domain is that of one process building domains one after another; the machine "
                     "is shared: see the load column"]
        same = None
        if label:
            same = runs[label][0]["scenario_ids"] == runs["this tree"][0]["scenario_ids"]
            rec.notes.append(f"same scenario ids as {label}: {same}")
        lines = ["Per domain (medians of the runs): CPU s of the orchestrator and the sandbox, wall s, "
                 "sandbox round trips, fresh sandbox children.", "",
                 "| code | runs | built/domains | scenarios | orchestrator CPU | sandbox CPU | CPU | wall | round trips "
                 "| fresh children | load at starts |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, rs in runs.items():
            m = med[name]
            lines.append(f"| {name} | {len(rs)} | {rs[0]['built']}/{rs[0]['domains']} | {rs[0]['scenarios']} | "
                         f"{m['orchestrator_cpu_s']:.3f} | {m['sandbox_cpu_s']:.3f} | {m['cpu_s']:.3f} | "
                         f"{m['wall_s']:.3f} | {m['round_trips']:.1f} | {m['fresh_children']:.1f} | "
                         f"{', '.join(str(r['load']) for r in rs)} |")
        if label:
            lines.append(f"| this / {label} | | | | " + " | ".join(
                f"{mine[k] / med[label][k]:.3f}" if med[label][k] else "-"
                for k in ("orchestrator_cpu_s", "sandbox_cpu_s", "cpu_s", "wall_s", "round_trips", "fresh_children"))
                + " | |")
        md = "\n".join(lines) + "\n\n" + "\n".join(f"- {x}" for x in rec.notes) + "\n"
        if prof_text:
            md += "\n## cProfile of this tree's orchestrator\n\n```\n" + prof_text + "\n```\n"
        print(rec.write(md))
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
