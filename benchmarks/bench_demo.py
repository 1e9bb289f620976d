"""The demo's figures (`make demo`) from its own result file, reports/demo.json (flows/demo.py writes it).

    .venv/bin/python benchmarks/bench_demo.py --workspace WS    # read a finished demo workspace
    .venv/bin/python benchmarks/bench_demo.py                   # run `agentscaler demo` (15 minutes' plan) first
    .venv/bin/python benchmarks/bench_demo.py --quick           # run the smallest demo plan (--minutes QUICK_MINUTES) first

Figures: wall time end to end and per pipeline stage, with each stage's CPU seconds (the demo's
process and the children it reaped: on a shared machine the work apart from the queueing), the funnel with its origins kept apart (tools,
domains, environments, scenarios, trajectories / verified / SFT rows for agent experience and gold
replays), and the evaluation of the base and the trained model on the same held-out scenarios
(pass^1..k with 95% intervals, scenario count, k; the paired difference trained - base). Results: benchmarks/results/demo.{json,md}; the
README's demo block (between `<!-- demo:start -->` and `<!-- demo:end -->`) is rendered from it by
benchmarks/run_all.py. A demo run takes 15-40 minutes on 2 cores (15 quiet), so `make bench` runs this script
only when named (BENCH=demo, or BENCH=demo ARGS="--workspace WS").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.catalog import Catalog  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from benchmarks.results_io import Figure, Recorder  # noqa: E402
from tasks.evaluation.report import demo_path  # noqa: E402

QUICK_MINUTES = 10  # the smallest plan flows/demo.demo_plan accepts, rounded up
STAGES = ["ingest", "discover", "build", "collect", "gold_replay", "train", "evaluate_base", "evaluate_trained"]
FUNNEL = [("tools", "tools"), ("domains", "domains"), ("environments", "environments (with the tau2 verticals)"),
          ("scenarios", "scenarios")]
ORIGINS = [("trajectories", "trajectories"), ("verified", "verified"), ("sft_rows", "SFT rows")]


def run_demo(ws: Path, minutes: float) -> None:
    """`agentscaler --workspace WS demo --minutes M` in its own process (as `make demo` runs it)."""
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "DS_BUILD_OPS": "0"}
    subprocess.run([str(Path(sys.executable).parent / "agentscaler"), "--workspace", str(ws), "demo",
                    "--minutes", f"{minutes:g}"], cwd=ROOT, env=env, check=True)


def from_catalog(ws: Path) -> dict | None:
    """A demo workspace from before flows/demo.py wrote reports/demo.json: its last finished pipeline run in
    the catalog (funnel, closed loop; wall time = the run's recorded start to finish, no per-stage times)."""
    runs = [r for r in Catalog(Workspace(ws).catalog_path).runs()
            if r["flow"] == "pipeline" and r["status"] in ("done", "done_with_failures") and r["finished_at"]]
    if not runs:
        return None
    r = runs[-1]
    wall = (datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(r["started_at"])).total_seconds()
    params = r["params"] or {}
    return {"funnel": r["summary"]["funnel"], "closed_loop": r["summary"].get("closed_loop"), "run_id": r["id"],
            "wall_s": round(wall, 1), "stage_wall_s": {}, "finished": r["finished_at"], "load": "not recorded",
            "from_catalog": True, "budget": {"plan": {k: params.get(k) for k in (
                "domains_limit", "rollout_domains", "gold_replay_domains", "eval_max_scenarios", "k", "max_steps")}}}


def figures(rec: Recorder, demo: dict, workload: str) -> None:
    budget = demo.get("budget") or {}
    wall_name = "demo pipeline, start to finish (wall, from the catalog)" if demo.get("from_catalog") else \
        "demo, end to end (wall)"
    rec.figures.append(Figure(name=wall_name, value=demo["wall_s"], unit="s", workload=workload,
                              aim=f"<= 15 min (issue 20; this run's budget: {budget.get('minutes', '?')} min)",
                              meets_aim=demo["wall_s"] <= 60 * min(15, budget.get("minutes", 20))))
    for stage in STAGES:
        if stage in (demo.get("stage_wall_s") or {}):
            rec.figures.append(Figure(name=f"demo stage {stage} (wall)", value=demo["stage_wall_s"][stage], unit="s",
                                      workload=workload))
        if stage in (demo.get("stage_cpu_s") or {}):
            rec.figures.append(Figure(name=f"demo stage {stage} (CPU: the demo and its reaped children)",
                                      value=demo["stage_cpu_s"][stage], unit="s", workload=workload))
    f = demo["funnel"]
    for key, label in FUNNEL:
        rec.figures.append(Figure(name=f"demo funnel: {label}", value=f[key], unit="", workload=workload))
    for key, label in ORIGINS:
        for origin, suffix in (("agent experience", "agent"), ("gold replay", "gold_replay")):
            rec.figures.append(Figure(name=f"demo funnel: {label}, {origin}", value=f[f"{key}_{suffix}"], unit="",
                                      workload=workload))
    for model, e in (demo.get("closed_loop") or {}).items():
        for k, est in sorted((e.get("pass^k") or {}).items(), key=lambda kv: int(kv[0])):
            iv = (e.get("intervals") or {}).get(k) or {}
            rec.figures.append(Figure(name=f"demo evaluation, {model} model: pass^{k} on {e['scenarios']} held-out "
                                           f"scenarios, {e['trials']} trials (95% interval {iv.get('low')}-"
                                           f"{iv.get('high')})", value=round(100 * est, 1), unit="%",
                                      workload=workload))
    cmp = demo.get("comparison")
    if cmp:
        for group, row in cmp["groups"].items():
            d = row["pass^k"]["1"]["difference"] or {}
            if d.get("estimate") is not None:
                rec.figures.append(Figure(name=f"demo evaluation: trained - base pass^1, {group} ({row['scenarios']} "
                                               f"scenarios; paired 95% interval {d.get('low')}-{d.get('high')})",
                                          value=round(100 * d["estimate"], 1), unit="points", workload=workload,
                                          aim=">= 10 points, intervals apart (issue 19)",
                                          meets_aim=cmp["aim"]["met"] if group == "overall" else None))


def table(demo: dict) -> str:
    f, st, cpu = demo["funnel"], demo.get("stage_wall_s") or {}, demo.get("stage_cpu_s") or {}
    lines = ["| stage | wall s | CPU s |", "|---|---|---|"] + [f"| {s} | {st[s]} | {cpu.get(s, '-')} |"
                                                              for s in STAGES if s in st]
    lines += [f"| end to end | {demo['wall_s']} | {round(sum(cpu.values()), 1) if cpu else '-'} (stages) |", "",
              "| funnel | agent | gold replay |", "|---|---|---|"]
    lines += [f"| {label} | {f[key + '_agent']} | {f[key + '_gold_replay']} |" for key, label in ORIGINS]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=None, help="a finished demo workspace (default: run the demo first)")
    ap.add_argument("--quick", action="store_true",
                    help=f"without --workspace: the smallest demo plan (--minutes {QUICK_MINUTES})")
    ap.add_argument("--minutes", type=float, default=None, help="the demo's budget when it runs here (default 15)")
    a = ap.parse_args()
    minutes = a.minutes or (QUICK_MINUTES if a.quick else 15)
    with Recorder("demo") as rec, tempfile.TemporaryDirectory() as tmp:
        ws = Path(a.workspace) if a.workspace else Path(tmp) / "ws"
        if not a.workspace:
            run_demo(ws, minutes)
        path = demo_path(Workspace(ws))
        demo = json.loads(path.read_text()) if path.exists() else from_catalog(ws)
        if demo is None:
            raise SystemExit(f"{path} missing and no finished pipeline run in {ws}'s catalog: not a demo workspace")
    plan = (demo.get("budget") or {}).get("plan") or {}
    source = "ran here" if not a.workspace else f"read from {ws}" + (
        ": the pipeline run in its catalog, a demo from before reports/demo.json, so no per-stage times and "
        "the demo's commit is not recorded" if demo.get("from_catalog") else "")
    minutes = (demo.get("budget") or {}).get("minutes")
    workload = (f"real: `make demo` ({source}, " + (f"{minutes:g}-minute plan" if minutes else "its plan")
                + (", quick" if a.quick and not a.workspace else "") + f"; k={plan.get('k')}), "
                f"finished {demo.get('finished', '?')}, load at its end {demo.get('load', 'not recorded')}")
    figures(rec, demo, workload)
    rec.layers = ["sandbox worker for every tool call (the demo's own)"]
    rec.notes.append(f"demo run {demo.get('run_id')}, plan {plan}; the load columns are this script's (it only "
                     f"reads the file when --workspace is given), the demo's own load is in the workload")
    print(rec.write(table(demo) + "\n\n" + "\n".join(f"- {n}" for n in rec.notes) + "\n"))


if __name__ == "__main__":
    main()
