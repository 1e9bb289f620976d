"""Closed loop on CPU: SmolLM2-135M held-out pass^k before and after SFT, and the environment-scaling curve.

    # base vs trained: >= 100 held-out scenarios from >= 20 held-out domains, k = 4, tau2 test splits
    .venv/bin/python benchmarks/closed_loop.py --workspace /work/cl/ws [--budget-minutes 90 | --main-steps 20]
    # the scaling curve: 0 (base), 8, 32, 128 and all train domains, the same steps, k = 1
    .venv/bin/python benchmarks/closed_loop.py --workspace /work/cl/ws --domains 8,32,128,all
    # tau2's test splits added to a loop run with --no-tau2 (the trained model never saw tau2)
    .venv/bin/python benchmarks/closed_loop.py --workspace /work/cl/ws --tau2-only

A workspace without environments is built first (bfcl + tau2 + nestful, rule-based synthesis). Every
phase resumes (content-hash run ids, training keys), so a killed run picks up where it stopped: run
it under nohup with a log. See flows/closed_loop.py for the phases. Writes <ws>/reports/closed_loop.
{md,json} (or scaling.{md,json,png}) and copies them to benchmarks/results/, with the machine's
load average beside the figures (the machine is shared: times are pessimistic).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"


class LoadSampler:
    """The 1-minute load average every `every` seconds while the benchmark runs."""

    def __init__(self, every: float = 60.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(every)

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def summary(self) -> dict[str, float]:
        s = sorted(self.samples) or [0.0]
        return {"min": round(s[0], 1), "median": round(s[len(s) // 2], 1), "max": round(s[-1], 1),
                "cpus": os.cpu_count() or 0}


def report_progress(ws, out: dict, no_copy: bool) -> None:
    """Interim figures of a run that spans sessions (`out`: flows.closed_loop.progress), labelled as such."""
    out["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out["workspace"] = str(ws.root)
    lines = [f"# Closed loop: interim progress ({out['when']})", "",
             f"Not the comparison: where the resumable run on {ws.root} stands, read from its files. Evaluation set: "
             f"{out['eval_set']['scenarios']} held-out scenarios from {out['eval_domains']} held-out domains "
             f"({out['eval_set']['single_call']} single-call, {out['eval_set']['multi_call']} multi-call), k = {out['k']}.", ""]
    for name in ("base", "trained"):
        r = out.get(name)
        if r is None:
            continue
        if r["finished"]:
            iv = r["intervals"]["overall"]["1"]
            lines.append(f"- {name} ({r['model']}): finished; pass^1 {iv['estimate']:.3f} (95% CI {iv['low']:.3f}-"
                         f"{iv['high']:.3f}), pass^k {r['pass^k']}; diagnostics {r['diagnostics']}; "
                         f"{r['cost']['seconds_per_request']} s per agent request")
        else:
            lines.append(f"- {name} ({r['model']}): {r['trials']} of {r['of']} trials written")
    tr = out.get("train")
    if tr:
        lines.append(f"- training: {'finished' if tr.get('finished', True) else 'running'}; "
                     + ", ".join(f"{k} {v}" for k, v in tr.items() if k not in ("finished", "final_dir", "dataset", "eval")))
    cmp = out.get("interim_comparison")
    if cmp:
        from tasks.evaluation.compare import markdown as compare_markdown

        lines += ["", f"## Interim comparison: {cmp['scenarios']} of {cmp['of']} held-out scenarios", "",
                  f"Base vs trained on the scenarios whose {cmp['trials_each']} trials both models have written "
                  "so far, verified in memory as the finished evaluation verifies them. Not the final figure: "
                  "these are the first domains in the evaluation's order, not a sample of the set.", "",
                  compare_markdown(cmp["comparison"], "base", "trained").rstrip("\n")]
    md = "\n".join(lines) + "\n"
    print(md)
    if not no_copy:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "closed_loop_progress.md").write_text(md)
        (RESULTS / "closed_loop_progress.json").write_text(json.dumps(out, indent=1, default=str))


def report_scaling_progress(ws, out: dict, no_copy: bool, name: str) -> None:
    """Interim state of a curve that spans sessions (`out`: flows.closed_loop.scaling_progress)."""
    from tasks.evaluation.report import penalty_text

    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [f"# Scaling curve: interim progress ({when})", "",
             f"Not the curve: where the resumable run on {ws.root} stands, read from its files. {out['steps']} steps a "
             f"point, k = {out['k']} on {out['scenarios']} held-out scenarios, the agent at {penalty_text(out)} (its "
             "evaluations at another penalty are other runs).", "",
             "| train domains | training | held-out evaluation |", "|---|---|---|"]
    for p in out["points"]:
        tr, ev = p.get("training", "none (base model)"), p.get("evaluation")  # the base point trains nothing
        if isinstance(tr, dict) and tr.get("finished"):
            tr = f"finished: {tr['global_step']} steps in {tr['train_seconds']:.0f} s, last loss {tr['last_loss']:.3f}"
        elif isinstance(tr, dict):
            tr = (f"running or stopped: {tr['steps_logged']} of {tr['of']} steps logged, a restart resumes from "
                  f"{tr['resumes_from'] or 'the start'}")
        if ev is None:
            ev = "not started"
        elif ev["finished"]:
            iv = ev["intervals"]["overall"]["1"]
            ev = f"finished: pass^1 {100 * iv['estimate']:.1f} [{100 * iv['low']:.1f}, {100 * iv['high']:.1f}]"
        else:
            ev = f"{ev['trials']} of {ev['of']} trials written"
        lines.append(f"| {p['label']} | {tr} | {ev} |")
    md = "\n".join(lines) + "\n"
    print(md)
    if not no_copy:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{name}_progress.md").write_text(md)
        (RESULTS / f"{name}_progress.json").write_text(json.dumps({**out, "when": when}, indent=1, default=str))


def main() -> None:
    from agentscaler.workspace import Workspace
    from flows.closed_loop import (ClosedLoopConfig, closed_loop, interim_comparison, progress, scaling_curve,
                                   scaling_progress, tau2_comparison)
    from tasks.rollouts.conversation import repeat_penalty_setting

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--domains", default=None, help="scaling curve points, e.g. 8,32,128,all (default: base vs trained)")
    ap.add_argument("--corpus", nargs="*", default=None, help="corpus names or paths when building (default: bfcl tau2 nestful)")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--eval-scenarios", type=int, default=None)
    ap.add_argument("--eval-domains", type=int, default=None)
    ap.add_argument("--max-prompt-tokens", type=int, default=None)
    ap.add_argument("--budget-minutes", type=float, default=None)
    ap.add_argument("--scaling-steps", type=int, default=None)
    ap.add_argument("--scaling-k", type=int, default=None, help="trials per scenario at each curve point (default 1; "
                    "4 with --no-base --domains all evaluates the main comparison's trained side first)")
    ap.add_argument("--main-steps", type=int, default=None, help="train the main run for these optimizer steps instead "
                    "of --budget-minutes (a scaling point trained on the same rows for as many steps is reused)")
    ap.add_argument("--learning-rate", type=float, default=None)
    ap.add_argument("--session-length", type=int, default=None)
    ap.add_argument("--experience-runs", nargs="*", default=None, help="accepted agent experience runs to train on too")
    ap.add_argument("--no-tau2", action="store_true", help="skip tau2's test splits")
    ap.add_argument("--tau2-only", action="store_true", help="add tau2's test splits, base vs the main run's "
                    "checkpoint, to a finished loop's report (nothing trained, the held-out comparison untouched)")
    ap.add_argument("--tau2-max-scenarios", type=int, default=None, help="per tau2 split (default: every test task)")
    ap.add_argument("--stop-when-failed", action="store_true", default=None, help="end a trial once verification "
                    "must fail it (a repeated call, a malformed reply): same verdicts, fewer requests")
    ap.add_argument("--repeat-penalty", type=repeat_penalty_setting, default=argparse.SUPPRESS,
                    help="the agent's repetition penalty (default 1.0: none, as vLLM's default); 'server': the "
                    "server's own default (llama-cpp-python's 1.1), as every evaluation made before this option existed")
    ap.add_argument("--threads", type=int, default=None, dest="torch_threads", help="training threads")
    ap.add_argument("--server-threads", type=int, default=None, help="each model server's threads (default 1)")
    ap.add_argument("--server-replicas", type=int, default=None, help="model servers per evaluation (default 2)")
    ap.add_argument("--scaling-conversations", type=int, default=None, help="equal data: every curve point trains on "
                    "this many conversations drawn evenly over its domains (default: all of its domains' rows)")
    ap.add_argument("--no-base", action="store_false", default=None, dest="scaling_base",
                    help="scaling curve without the base model's point (e.g. a depth point beside a curve that has it)")
    ap.add_argument("--name", default=None, help="results file stem (default: scaling, or closed_loop)")
    ap.add_argument("--no-copy", action="store_true", help="do not copy the results to benchmarks/results/")
    ap.add_argument("--progress", action="store_true", help="only report where a run stands (interim figures "
                    "from the workspace's files) to benchmarks/results/closed_loop_progress.{json,md}; with --domains, "
                    "where each curve point stands, to <name>_progress.{json,md}")
    a = vars(ap.parse_args())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ws = Workspace(a.pop("workspace"))
    domains = a.pop("domains")
    no_copy = a.pop("no_copy")
    stem = a.pop("name")
    if a.pop("no_tau2"):
        a["tau2"] = False
    only_progress = a.pop("progress")
    tau2_only = a.pop("tau2_only")
    if domains:
        a["scaling_points"] = [d.strip() for d in domains.split(",") if d.strip()]
    penalty = {"repeat_penalty": a.pop("repeat_penalty")} if "repeat_penalty" in a else {}  # None: 'server'
    cfg = ClosedLoopConfig(**{k: v for k, v in a.items() if v is not None}, **penalty)
    if only_progress and domains:
        report_scaling_progress(ws, scaling_progress(ws, cfg), no_copy, stem or "scaling")
        return
    if only_progress:
        report_progress(ws, {**progress(ws, cfg), "interim_comparison": interim_comparison(ws, cfg)}, no_copy)
        return
    t0 = time.time()
    with LoadSampler() as load:
        out = scaling_curve(ws, cfg) if domains else tau2_comparison(ws, cfg) if tau2_only else closed_loop(ws, cfg)
    report = "scaling" if domains else "closed_loop"  # the workspace report's stem (and its figure's)
    name = stem or report
    out["benchmark"] = {"wall_s": round(time.time() - t0, 1), "load_average": load.summary()}
    md = (ws.reports_dir / f"{report}.md").read_text().replace(f"]({report}", f"]({name}")
    md += (f"\nMachine: {out['benchmark']['load_average']['cpus']} CPUs, load average (1 min) during this run "
           f"{load.summary()['min']}-{load.summary()['max']} (median {load.summary()['median']}); wall "
           f"{out['benchmark']['wall_s']} s for this invocation (a resumed run skips finished phases).\n")
    (ws.reports_dir / f"{name}.md").write_text(md)
    (ws.reports_dir / f"{name}.json").write_text(json.dumps(out, indent=1, default=str))
    if not no_copy:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{name}.md").write_text(md)
        (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1, default=str))
        for png in ("scaling.png",) if domains else ("closed_loop_training.png",):
            if (ws.reports_dir / png).exists():
                shutil.copy(ws.reports_dir / png, RESULTS / png.replace(report, name))
    print(md)


if __name__ == "__main__":
    main()
