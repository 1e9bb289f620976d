"""`make bench`: runs every benchmark script, then rebuilds the README figures table from the results files.

    .venv/bin/python benchmarks/run_all.py                 # every script that has --quick, bounded runs
    .venv/bin/python benchmarks/run_all.py --only tau2     # one script (bench_tau2.py); `make bench BENCH=tau2`
    .venv/bin/python benchmarks/run_all.py --full          # full runs; `make bench FULL=1`
    .venv/bin/python benchmarks/run_all.py --table-only    # rebuild the tables from the results files alone
    make bench BENCH=closed_loop ARGS="--workspace /data/cl"   # a long one, with its own arguments

Each script runs in its own subprocess with a timeout; one that fails or times out gets a row saying so
(with the reason) and the others still run. Scripts that take hours (LONG) run only when named with
--only; their existing results files still feed the table. A script without a --quick mode is not run
in quick mode (its row says so). The table is written between the README markers
`<!-- figures:start -->` and `<!-- figures:end -->`, the closed-loop table (from closed_loop.json)
between `<!-- closed-loop:start -->` and `<!-- closed-loop:end -->`, the demo's figures (from demo.json,
bench_demo.py) between `<!-- demo:start -->` and `<!-- demo:end -->` (a missing results file renders
"not measured"), and all of them to benchmarks/results/README-figures.md. Figures never enter the
README by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_io import RESULTS, Results, commit, load_results  # noqa: E402

README = ROOT / "README.md"
STATUS = "run_all.json"  # the last outcome of every script, kept across runs (one script may run alone)
# Hours-long runs, and bench_settled (it reads a workspace's recorded runs): only when named
# (`make bench BENCH=closed_loop ARGS=...`); their results files still count.
LONG = {"closed_loop", "bench_train", "bench_prefix", "bench_lanes", "bench_synth_llm", "bench_bfcl", "bench_demo",
        "bench_settled"}
QUICK_TIMEOUT_S = 900  # bench_faults --quick took 414-516 s at load 13-23
FULL_TIMEOUT_S = 4 * 3600
MARKERS = {"figures": ("<!-- figures:start -->", "<!-- figures:end -->"),
           "closed-loop": ("<!-- closed-loop:start -->", "<!-- closed-loop:end -->"),
           "demo": ("<!-- demo:start -->", "<!-- demo:end -->"),
           "gpu": ("<!-- gpu:start -->", "<!-- gpu:end -->")}
OWN_BLOCK = {"demo"}  # benchmarks rendered in a block of their own, not in the figures table


def scripts() -> list[Path]:
    return sorted(ROOT.glob("benchmarks/bench_*.py")) + [ROOT / "benchmarks" / "closed_loop.py"]


def has_quick(path: Path) -> bool:
    return '"--quick"' in path.read_text()


def short(name: str) -> str:
    return name.removeprefix("bench_")


def failure_reason(rc: int, stderr: str) -> str:
    """The last line that names an error (a traceback's last line), else the last line, else the exit code."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    named = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit|Interrupt)\b", ln)]
    why = (named or lines or [""])[-1][:200]
    return f"exit {rc}" + (f": {why}" if why else "")


def run_one(path: Path, full: bool, timeout_s: float, logs: Path, extra: list[str] | None = None) -> dict[str, object]:
    """Runs one script in its own process; returns its status row (ok / failed / timeout) with seconds."""
    cmd = [sys.executable, str(path)] + ([] if full else ["--quick"]) + (extra or [])
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{path.stem}.log"
    t0 = time.time()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        out, err, rc = p.stdout, p.stderr, p.returncode
        status = "ok" if rc == 0 else "failed"
        reason = "" if rc == 0 else failure_reason(rc, err)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        status, reason = "failed", f"timed out after {timeout_s:.0f} s"
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return {"status": status, "reason": reason, "seconds": round(time.time() - t0, 1),
            "mode": "full" if full else "quick", "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "log": str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log)}


def load_status(out_dir: Path) -> dict[str, dict[str, object]]:
    p = out_dir / STATUS
    status = json.loads(p.read_text()).get("scripts", {}) if p.exists() else {}
    for path in scripts():  # a script that gained --quick since: its row must not say otherwise
        st = status.get(path.stem, {})
        if st.get("status") == "not run" and "no --quick" in str(st.get("reason")) and has_quick(path):
            status[path.stem] = {**st, "reason": "not run by make bench since it gained --quick; its rows above, "
                                                 "if any, come from its own last run (commit and load in each row)"}
    return status


def summary_line(out_dir: Path) -> str:
    """What the table comes from, and the last run_all invocation's time and load."""
    p = out_dir / STATUS
    d = json.loads(p.read_text()) if p.exists() else {}
    st = d.get("scripts", {})
    n = {k: sum(s.get("status") == k for s in st.values()) for k in ("ok", "failed", "not run")}
    when = ""
    for key, what in (("last_run", "Last whole `make bench`"), ("last_named", "Since then, named")):
        last = d.get(key)
        if last and (key == "last_run" or last["finished"] > d.get("last_run", {}).get("finished", "")):
            when += (f" {what} ({last['mode']}{': ' + ', '.join(last['only']) if last['only'] else ''}): "
                     f"{last['seconds']} s, finished {last['finished']}, load (1 min) {last['load_start'][0]} → "
                     f"{last['load_end'][0]}.")
    return (f"Generated by `make bench` (benchmarks/run_all.py) from benchmarks/results/*.json; each row names its "
            f"commit and the load while it ran ({os.cpu_count()} CPUs, shared). Scripts: {n['ok']} ok, {n['failed']} "
            f"failed, {n['not run']} not run.{when}")


def fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if float(x).is_integer() and abs(x) < 1e9:
        return f"{int(x):,}"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def figure_rows(results: list[Results]) -> list[str]:
    rows = []
    for r in results:
        load = f"{r.load_start[0]} → {r.load_end[0]}" if r.load_start else "—"
        for f in r.figures:
            value = f"{fmt(f.value)} {f.unit}"
            if f.p99 is not None:
                value += f" (median {fmt(f.median if f.median is not None else f.value)}, p99 {fmt(f.p99)})"
            ratio = f"; ratio {f.ratio_to_anchor:.2f}x" if f.ratio_to_anchor is not None else ""
            measured = quoted = "—"
            if f.anchor and f.anchor.kind == "measured":
                measured = f"{fmt(f.anchor.value)} {f.anchor.unit} ({f.anchor.source}){ratio}"
            elif f.anchor:
                quoted = f"{fmt(f.anchor.value)} {f.anchor.unit} (source: {f.anchor.source}){ratio}"
            meets = {True: "yes", False: "**no**", None: "—"}[f.meets_aim]
            rows.append("| " + " | ".join(cell(x) for x in (
                f"{f.name} (`{r.benchmark}`)", value, f.workload, measured, quoted, f.aim or "—", meets, r.commit,
                load)) + " |")
    return rows


def figures_table(results: list[Results], status: dict[str, dict[str, object]], summary: str) -> str:
    head = ("| figure | value | workload | anchor, measured same run | anchor, quoted | aim | meets aim | commit "
            "| load (1 min, start → end) |\n|---|---|---|---|---|---|---|---|---|")
    lines = [summary, "", head, *figure_rows([r for r in results if r.benchmark not in OWN_BLOCK])]
    for name, st in sorted(status.items()):
        if st.get("status") != "ok":
            lines.append("| " + " | ".join(cell(x) for x in (
                f"`{name}.py`", f"{st.get('status')}: {st.get('reason', '')}", "—", "—", "—", "—", "—", "—", "—"))
                + " |")
    return "\n".join(lines) + "\n"


def closed_loop_table(out_dir: Path) -> str:
    """Base vs trained from closed_loop.json: flows/closed_loop.py's comparison (pass^k with intervals,
    paired differences, by length, how far the agent got), then training and cost per request; then the
    environment-scaling curve from scaling.json when there is one.
    A file in the earlier format (one baseline/trained row each, before flows/closed_loop.py) still renders."""
    p = out_dir / "closed_loop.json"
    if not p.exists():
        return "No closed-loop results yet (`make bench BENCH=closed_loop`).\n"
    d = json.loads(p.read_text())
    text = _closed_loop_comparison(d) if "comparison" in d else _closed_loop_rows(d)
    return text + scaling_block(out_dir)


def scaling_block(out_dir: Path) -> str:
    """The scaling curve's table (tasks.evaluation.report.scaling_markdown) under its own heading, its
    figure linked from the README's folder."""
    from tasks.evaluation.report import scaling_markdown

    p = out_dir / "scaling.json"
    if not p.exists():
        return ""
    d = json.loads(p.read_text())
    md = scaling_markdown({**d, "figure": d.get("figure") or "scaling.png"})
    body = md.split("\n", 2)[2]  # without its title line
    rel = (out_dir / "scaling.png").relative_to(ROOT) if (out_dir / "scaling.png").is_relative_to(ROOT) else "scaling.png"
    body = re.sub(r"!\[scaling curve\]\([^)]*\)", f"![scaling curve]({rel})", body)
    load = (d.get("benchmark") or {}).get("load_average")
    src = (f"From `benchmarks/results/scaling.json` (`benchmarks/closed_loop.py --domains ...`)"
           + (f"; load (1 min) {load['min']}-{load['max']}, median {load['median']}, during the last invocation" if load
              else "") + ".")
    return "\nEnvironment-scaling curve. " + src + "\n\n" + body.strip("\n") + "\n"


def _closed_loop_comparison(d: dict) -> str:
    """The comparison's tables (tasks.evaluation.compare.markdown), with where they come from."""
    from tasks.evaluation.compare import markdown as compare_markdown
    from tasks.evaluation.report import cost_table, tau2_settings_line

    cfg, ev, tr, bench = d["config"], d["eval_set"], d["train"], d.get("benchmark", {})
    base, trained = d["base"]["heldout"], d["trained"]["heldout"]
    val = [v["loss"] for v in tr.get("curve", {}).get("validation", [])]
    load = bench.get("load_average")
    lines = [
        f"From `benchmarks/results/closed_loop.json` (`benchmarks/closed_loop.py`): {ev['scenarios']} held-out "
        f"scenarios from {len(ev['domains'])} held-out domains ({ev['single_call']} single-call, {ev['multi_call']} "
        f"multi-call), k = {cfg['k']}, the same scenarios and decoding for both models ({d.get('runtime', '')}); "
        f"trained {tr['global_step']} optimizer steps in {tr['train_seconds']:.0f} s ("
        + (f"{cfg['main_steps']} steps planned" if cfg.get("main_steps") else f"{cfg['budget_minutes']} min budget")
        + f", {tr['tokens_per_second'] or 0:.0f} tokens/s, {tr['epochs'] or 0:.2f} epoch), train loss "
        f"{tr['first_loss']:.3f} → {tr['last_loss']:.3f}"
        + (f", validation loss {val[0]:.3f} → {val[-1]:.3f}" if val else "")
        + (f"; load (1 min) {load['min']}-{load['max']}, median {load['median']}, on {load['cpus']} CPUs "
           "during the last invocation" if load else "; load not recorded") + ".", "",
        compare_markdown(d["comparison"], base["model"], trained["model"]).rstrip("\n"), "", *cost_table(d)]
    if d.get("tau2_comparison"):
        lines += ["", f"tau2-bench test splits (scored as tau2 scores them): {tau2_settings_line(d)}", "",
                  compare_markdown(d["tau2_comparison"], base["model"], trained["model"]).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _closed_loop_rows(d: dict) -> str:
    """The earlier format, like with like: wall vs wall, agent LLM time vs LLM time. A phase whose
    wall time is below its own LLM time was resumed (its conversations ran in an earlier
    invocation), so its wall time is not comparable and the row says so."""
    ks = sorted(d.get("baseline", {}).get("pass^k", {}), key=int)
    head = ("| model | trials | " + " | ".join(f"pass^{k}" for k in ks) + " | tried a tool call | format errors | "
            "agent LLM time | conversations (summed) | evaluation wall | resumed |\n|"
            + "---|" * (8 + len(ks)))
    rows = []
    for key in ("baseline", "trained"):
        e = d.get(key)
        if not e:
            continue
        resumed = e["seconds"] < e.get("agent_llm_s", 0)
        wall = f"{e['seconds']:.1f} s" + (" (resumed: not comparable)" if resumed else "")
        rows.append(f"| {e['model']} | {e['trials']} | " + " | ".join(f"{e['pass^k'][k]:.3f}" for k in ks)
                    + f" | {e['trials_attempting_calls']} / {e['trials']} | {e.get('format_errors', 0)} | "
                    f"{e.get('agent_llm_s', 0):.1f} s | {e.get('conversations_s', 0):.1f} s | {wall} | "
                    f"{'yes' if resumed else 'no'} |")
    cfg, bench = d.get("config", {}), d.get("benchmark", {})
    note = (f"From `benchmarks/results/closed_loop.json` (`benchmarks/closed_loop.py`): {cfg.get('heldout_scenarios')} "
            f"held-out scenarios, k={cfg.get('k')}, corpus {', '.join(cfg.get('corpus', []))}, "
            f"{d.get('train', {}).get('global_step')} optimizer steps"
            + (f", loss {d['train']['first_loss']:.2f} → {d['train']['last_loss']:.2f}" if d.get("train") else "")
            + (f"; load {bench['load_average']}" if bench.get("load_average") else "; load not recorded") + ". "
            "Compare the agent LLM time columns (the wall time of a resumed phase only counts what ran last).")
    return note + "\n\n" + head + "\n" + "\n".join(rows) + "\n"


def demo_block(out_dir: Path) -> str:
    """The demo's figures from demo.json (benchmarks/bench_demo.py): one row per figure, with its commit and workload."""
    found = [r for r in load_results(out_dir) if r.benchmark == "demo"]
    if not found:
        return (f"Not measured at {commit()}: no `benchmarks/results/demo.json` (`make bench BENCH=demo` runs the "
                "demo and records it; `make bench BENCH=demo ARGS=\"--workspace WS\"` reads a finished demo "
                "workspace).\n")
    r = found[0]
    work = r.figures[0].workload if r.figures else "—"
    head = (f"Generated from `benchmarks/results/demo.json` (recorded by `benchmarks/bench_demo.py` at commit "
            f"{r.commit}, {r.started}). Workload: {work}.")
    rows = ["| figure | value |", "|---|---|"]
    for f in r.figures:
        meets = "" if f.meets_aim is None else f" (aim {f.aim}: {'met' if f.meets_aim else '**not met**'})"
        rows.append(f"| {cell(f.name)} | {fmt(f.value)}{(' ' + f.unit) if f.unit else ''}{cell(meets)} |")
    return head + "\n\n" + "\n".join(rows) + "\n"


def gpu_block(out_dir: Path) -> str:
    """The GPU SFT medians from gpu.json (benchmarks/gpu/collect.py, from run.sh's results on a lent GPU)."""
    from benchmarks.gpu.collect import anchor_line, median_table

    path = out_dir / "gpu.json"
    if not path.exists():
        return ("Not measured: no `benchmarks/results/gpu.json` (a GPU is needed; benchmarks/gpu/README.md says how "
                "to run it on one and `benchmarks/gpu/collect.py` records it).\n")
    d = json.loads(path.read_text())
    runs = d["runs"]
    return (f"Generated from `benchmarks/results/gpu.json` (benchmarks/gpu/, measured {d['date']} on "
            f"{runs[0]['device']}, code at {d['commit']}; {runs[0]['versions']}; {len(runs)} runs, medians; "
            "details in `benchmarks/results/gpu.md`).\n\n" + median_table(d["medians"]) + "\n"
            + (f"\n{anchor_line(d['cpu_anchor'], d['medians'])}\n" if d.get("cpu_anchor") else ""))


def replace_between(text: str, start: str, end: str, body: str) -> str:
    """Replaces what lies between the markers (kept); raises if they are missing, so nothing is lost silently."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"README markers {start} ... {end} missing or out of order")
    return text[: i + len(start)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


def rebuild(out_dir: Path = RESULTS, readme: Path = README) -> str:
    """Writes README-figures.md and the README's generated sections from the results files; returns the table."""
    figs = figures_table(load_results(out_dir), load_status(out_dir), summary_line(out_dir))
    cl = closed_loop_table(out_dir)
    demo = demo_block(out_dir)
    gpu = gpu_block(out_dir)
    (out_dir / "README-figures.md").write_text("# Figures (generated by benchmarks/run_all.py)\n\n" + figs
                                                + "\n## Closed loop\n\n" + cl + "\n## The demo\n\n" + demo
                                                + "\n## GPU SFT (DeepSpeed ZeRO-2/3)\n\n" + gpu)
    if readme.exists():
        text = readme.read_text()
        text = replace_between(text, *MARKERS["figures"], figs)
        text = replace_between(text, *MARKERS["closed-loop"], cl)
        text = replace_between(text, *MARKERS["demo"], demo)
        text = replace_between(text, *MARKERS["gpu"], gpu)
        readme.write_text(text)
    return figs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="script names, e.g. tau2 or bench_tau2 (LONG ones too)")
    ap.add_argument("--full", action="store_true", help="full runs instead of --quick")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per script")
    ap.add_argument("--table-only", action="store_true", help="rebuild the tables only")
    ap.add_argument("--args", default="", help="extra arguments for the named script, e.g. '--workspace ws'")
    a = ap.parse_args()
    status = load_status(RESULTS)
    if not a.table_only:
        t0 = time.time()
        load0 = [round(x, 2) for x in os.getloadavg()]
        wanted = {n if n.startswith("bench_") or n == "closed_loop" else f"bench_{n}" for n in (a.only or [])}
        todo = [p for p in scripts() if (p.stem in wanted if wanted else p.stem not in LONG)]
        missing = wanted - {p.stem for p in scripts()}
        if missing:
            raise SystemExit(f"no such benchmark: {', '.join(sorted(missing))}")
        timeout = a.timeout or (FULL_TIMEOUT_S if a.full else QUICK_TIMEOUT_S)
        for p in scripts():  # a long one keeps its last outcome; one never run says why
            if not wanted and p.stem in LONG and status.get(p.stem, {}).get("status") not in ("ok", "failed"):
                status[p.stem] = {"status": "not run", "reason": "long: runs only when named (BENCH=name)", "seconds": 0}
        for p in todo:
            full = a.full or not has_quick(p)
            if full and not a.full and not wanted:
                status[p.stem] = {"status": "not run", "reason": "no --quick mode (run it with FULL=1 or BENCH=name)",
                                  "seconds": 0}
                print(f"{p.stem}: not run (no --quick mode)", flush=True)
                continue
            # a named script with one mode only runs in full, with a full run's timeout
            limit = a.timeout or FULL_TIMEOUT_S if full else timeout
            print(f"{p.stem}: running ({'full' if full else 'quick'}, timeout {limit:.0f} s)", flush=True)
            status[p.stem] = run_one(p, full, limit, RESULTS / "logs", a.args.split())
            print(f"{p.stem}: {status[p.stem]['status']} in {status[p.stem]['seconds']} s "
                  f"{status[p.stem]['reason']}", flush=True)
        last = {"seconds": round(time.time() - t0, 1), "load_start": load0,
                "load_end": [round(x, 2) for x in os.getloadavg()], "mode": "full" if a.full else "quick",
                "only": sorted(wanted), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        RESULTS.mkdir(parents=True, exist_ok=True)
        record = json.loads((RESULTS / STATUS).read_text()) if (RESULTS / STATUS).exists() else {}
        # a named run (BENCH=name) is recorded apart: the last whole run's time and load stay in the summary
        record.update({"commit": commit(), "last_named" if wanted else "last_run": last, "scripts": status})
        (RESULTS / STATUS).write_text(json.dumps(record, indent=2) + "\n")
    print(rebuild())


if __name__ == "__main__":
    main()
