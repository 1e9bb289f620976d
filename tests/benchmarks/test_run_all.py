"""make bench's table: rebuilt from results files between the README markers; failed scripts shown as failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import run_all
from benchmarks.results_io import ROOT, Anchor, Figure, Recorder, Results, load_results

README = """# project

intro

<!-- figures:start -->
old hand-typed table: 999 ms
<!-- figures:end -->

middle text stays

<!-- closed-loop:start -->
old closed loop
<!-- closed-loop:end -->

<!-- demo:start -->
The demo (hand-typed): 18 min 54 s
<!-- demo:end -->

<!-- gpu:start -->
GPU (hand-typed): 99% MFU
<!-- gpu:end -->

closing words
"""


def _block(text: str, name: str) -> str:
    """What the README holds between a block's markers."""
    start, end = run_all.MARKERS[name]
    return text.split(start)[1].split(end)[0]


def _rebuilt_block(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A fresh README rebuilt from tmp_path's results files, and its block `name`."""
    readme = tmp_path / "README.md"
    readme.write_text(README)
    run_all.rebuild(out_dir=tmp_path, readme=readme)
    return readme, _block(readme.read_text(), name)


def _results(out: Path) -> None:
    rec = Recorder("sample")
    with rec:
        rec.figures.append(Figure(name="read call", value=52.0, unit="us", median=52.0, p99=115.0,
                                  workload="real: tau2 airline", ratio_to_anchor=1.2, aim="<= 1.5x", meets_aim=True,
                                  anchor=Anchor(value=43.3, unit="us", kind="measured", source="tau2 same run")))
        rec.figures.append(Figure(name="slot use", value=95.0, unit="%", workload="fixture: shop",
                                  anchor=Anchor(value=72.0, unit="%", kind="quoted", source="a note"),
                                  aim=">= 95%", meets_aim=False))
        rec.layers = ["seccomp"]
    rec.write("body", out_dir=out)


def test_results_round_trip(tmp_path):
    _results(tmp_path)
    (tmp_path / "free_form.json").write_text('{"not": "the common shape"}')  # skipped, not an error
    [res] = load_results(tmp_path)
    assert res.benchmark == "sample" and res.layers == ["seccomp"]
    assert res.figures[0].anchor.kind == "measured" and res.figures[0].p99 == 115.0
    again = Results.model_validate_json(json.dumps(res.model_dump()))
    assert again == res
    assert (tmp_path / "sample.md").read_text().startswith("# sample\n\ncommit ")


def test_table_regenerated_between_markers(tmp_path):
    _results(tmp_path)
    (tmp_path / run_all.STATUS).write_text(json.dumps({"scripts": {
        "bench_ok": {"status": "ok", "reason": "", "seconds": 3},
        "bench_broken": {"status": "failed", "reason": "exit 1: ValueError: no workspace", "seconds": 1}}}))
    (tmp_path / "closed_loop.json").write_text(json.dumps({
        "config": {"heldout_scenarios": 4, "k": 2, "corpus": ["bfcl"]},
        "train": {"global_step": 10, "first_loss": 0.79, "last_loss": 0.12},
        "baseline": {"model": "base", "trials": 8, "pass^k": {"1": 0.0, "2": 0.0}, "trials_attempting_calls": 0,
                     "agent_llm_s": 286.3, "conversations_s": 569.5, "seconds": 1.3},
        "trained": {"model": "sft", "trials": 8, "pass^k": {"1": 0.0, "2": 0.0}, "trials_attempting_calls": 6,
                    "agent_llm_s": 73.5, "conversations_s": 390.8, "seconds": 208.6, "format_errors": 6}}))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    run_all.rebuild(out_dir=tmp_path, readme=readme)
    text = readme.read_text()
    assert "999 ms" not in text and "old closed loop" not in text
    for kept in ("intro", "middle text stays", "closing words", *run_all.MARKERS["figures"], *run_all.MARKERS["closed-loop"]):
        assert text.count(kept) == 1, kept
    figs = _block(text, "figures")
    row = next(ln for ln in figs.splitlines() if ln.startswith("| read call"))
    assert "52 us (median 52, p99 115)" in row and "43.3 us (tau2 same run); ratio 1.20x" in row
    slot = next(ln for ln in figs.splitlines() if ln.startswith("| slot use"))
    cells = [c.strip() for c in slot.strip("|").split("|")]
    assert cells[3] == "—" and cells[4].startswith("72 % (source: a note)") and cells[6] == "**no**"
    assert "| `bench_broken.py` | failed: exit 1: ValueError: no workspace |" in figs
    assert "bench_ok" not in figs
    loop = text.split(run_all.MARKERS["closed-loop"][0])[1]
    base = next(ln for ln in loop.splitlines() if ln.startswith("| base"))
    assert "286.3 s" in base and "1.3 s (resumed: not comparable)" in base and base.rstrip().endswith("yes |")
    trained = next(ln for ln in loop.splitlines() if ln.startswith("| sft"))
    assert "73.5 s" in trained and trained.rstrip().endswith("no |")
    assert (tmp_path / "README-figures.md").read_text().count("| read call") == 1


DEMO = {"wall_s": 1035.2, "finished": "2026-12-02T00:00:03Z", "load": [1.8, 1.8, 3.0], "run_id": "pipeline-x",
        "stage_wall_s": {"ingest": 30.1, "discover": 12.0, "build": 120.5, "collect": 118.0, "gold_replay": 20.0,
                         "train": 300.0, "evaluate_base": 184.7, "evaluate_trained": 81.4},
        "budget": {"minutes": 20, "planned_s": 1140, "wall_s": 1035.2,
                   "plan": {"domains_limit": None, "rollout_domains": 4, "gold_replay_domains": 20,
                            "eval_max_scenarios": 3, "k": 2, "max_steps": 2}},
        "funnel": {"tools": 3731, "domains": 219, "environments": 221, "scenarios": 1903, "trajectories": 260,
                   "trajectories_agent": 4, "trajectories_gold_replay": 256, "verified_agent": 0,
                   "verified_gold_replay": 256, "sft_rows_agent": 0, "sft_rows_gold_replay": 176},
        "closed_loop": {"baseline": {"pass^k": {"1": 0.0, "2": 0.0}, "scenarios": 3, "trials": 6,
                                     "intervals": {"1": {"low": 0.0, "high": 0.0}, "2": {"low": 0.0, "high": 0.0}}},
                        "trained": {"pass^k": {"1": 0.166667, "2": 0.0}, "scenarios": 3, "trials": 6,
                                    "intervals": {"1": {"low": 0.0, "high": 0.5}, "2": {"low": 0.0, "high": 0.0}}}}}


def test_demo_block_from_results_file_or_not_measured(tmp_path):
    """The demo block: "not measured" without demo.json; bench_demo.py's rows (read from a demo workspace's
    reports/demo.json, written here by hand in the shape flows/demo.py writes) once it exists."""
    readme, block = _rebuilt_block(tmp_path, "demo")
    assert "Not measured at " in block and "18 min 54 s" not in block
    ws = tmp_path / "ws"
    (ws / "reports").mkdir(parents=True)
    (ws / "reports" / "demo.json").write_text(json.dumps(DEMO))
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_demo.py"), "--workspace", str(ws)],
                       env={**os.environ, "AGENTSCALER_BENCH_RESULTS": str(out)}, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    run_all.rebuild(out_dir=out, readme=readme)
    text = readme.read_text()
    block = _block(text, "demo")
    assert "Not measured" not in block and "benchmarks/results/demo.json" in block
    rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in block.splitlines() if ln.startswith("| demo")}
    assert rows["demo, end to end (wall)"].startswith("1,035 s (aim") and "**not met**" in rows["demo, end to end (wall)"]
    assert rows["demo stage build (wall)"] == "120 s"
    assert rows["demo funnel: trajectories, gold replay"] == "256" and rows["demo funnel: SFT rows, agent experience"] == "0"
    trained = next(v for k, v in rows.items() if k.startswith("demo evaluation, trained model: pass^1 on 3"))
    assert trained == "16.7 %"
    figs = _block(text, "figures")
    assert "demo funnel" not in figs  # rendered once, in its own block


def test_missing_markers_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(ValueError, match="markers"):
        run_all.rebuild(out_dir=tmp_path, readme=readme)
    assert readme.read_text() == "# no markers\n"


def test_failing_script_reported_and_others_run(tmp_path):
    bad = tmp_path / "bench_bad.py"
    bad.write_text("raise RuntimeError('broken on purpose')\n")
    slow = tmp_path / "bench_slow.py"
    slow.write_text("import time\ntime.sleep(30)\n")
    good = tmp_path / "bench_good.py"
    good.write_text("print('fine')\n")
    got = {p.stem: run_all.run_one(p, full=True, timeout_s=3, logs=tmp_path / "logs") for p in (bad, slow, good)}
    assert got["bench_bad"]["status"] == "failed" and "RuntimeError: broken on purpose" in got["bench_bad"]["reason"]
    assert got["bench_slow"]["reason"] == "timed out after 3 s"
    assert got["bench_good"]["status"] == "ok"
    assert "fine" in (tmp_path / "logs" / "bench_good.log").read_text()


def test_every_own_benchmark_has_quick_mode():
    """The scripts make bench runs by default accept --quick (scripts other helpers own are listed apart)."""
    others = {"bench_verify", "bench_synth", "bench_envs", "bench_production", "bench_mcp"}
    mine = [p for p in run_all.scripts() if p.stem not in run_all.LONG | others]
    missing = [p.name for p in mine if not run_all.has_quick(p)]
    assert not missing, missing


def test_rollout_quick_end_to_end(tmp_path):
    """One benchmark in --quick mode, in a subprocess as make bench runs it, writes the common shape (~20 s)."""
    from envs.sandbox import bwrap_works

    if not bwrap_works():
        pytest.skip("bubblewrap cannot create namespaces here")
    p = subprocess.run([sys.executable, "benchmarks/bench_rollout.py", "--quick", "--trials", "2"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "AGENTSCALER_BENCH_RESULTS": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-2000:]
    res = Results.model_validate_json((tmp_path / "rollout.json").read_text())
    assert res.layers and res.load_start and res.commit
    sims = next(f for f in res.figures if f.name == "simulations per hour per process")
    assert sims.value > 0 and "(quick)" in sims.workload
    quoted = [f.anchor for f in res.figures if f.anchor]
    assert all(a.kind == "quoted" and "tau2-bench" in a.source for a in quoted)


def test_summary_keeps_last_whole_run(tmp_path):
    run = {"seconds": 1109.7, "load_start": [14.75], "load_end": [17.83], "mode": "quick", "only": [],
           "finished": "2026-12-01T22:29:22Z"}
    named = {**run, "seconds": 111.3, "only": ["bench_tau2"], "finished": "2026-12-01T22:35:52Z"}
    (tmp_path / run_all.STATUS).write_text(json.dumps({"scripts": {}, "last_run": run, "last_named": named}))
    line = run_all.summary_line(tmp_path)
    assert "Last whole `make bench` (quick): 1109.7 s" in line and "named (quick: bench_tau2): 111.3 s" in line
    (tmp_path / run_all.STATUS).write_text(json.dumps({"scripts": {}, "last_run": {**run, "finished": "2026-12-02"},
                                                       "last_named": named}))
    assert "named" not in run_all.summary_line(tmp_path)  # an older named run is not news


def test_bench_demo_reads_an_older_demo_workspace_from_its_catalog(tmp_path):
    """A demo workspace from before reports/demo.json: the funnel and evaluation come from its pipeline run in
    the catalog (recorded here through the Catalog API with the summary shape pipeline_flow writes), labelled so."""
    from agentscaler.catalog import Catalog
    from agentscaler.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    catalog = Catalog(ws.catalog_path)
    catalog.start_run("pipeline-old", "pipeline", {"k": 2, "eval_max_scenarios": 3})
    catalog.finish_run("pipeline-old", "done", {"funnel": DEMO["funnel"], "closed_loop": DEMO["closed_loop"]})
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_demo.py"), "--workspace", str(ws.root)],
                       env={**os.environ, "AGENTSCALER_BENCH_RESULTS": str(out)}, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    [res] = load_results(out)
    names = {f.name: f for f in res.figures}
    assert "demo pipeline, start to finish (wall, from the catalog)" in names
    assert not any(n.startswith("demo stage") for n in names)  # no per-stage times to read
    assert names["demo funnel: SFT rows, gold replay"].value == 176
    assert "the demo's commit is not recorded" in res.figures[0].workload
    empty = Workspace(tmp_path / "empty")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_demo.py"), "--workspace", str(empty.root)],
                       env={**os.environ, "AGENTSCALER_BENCH_RESULTS": str(tmp_path / "none")}, capture_output=True,
                       text=True)
    assert p.returncode != 0 and "not a demo workspace" in p.stderr


def test_scaling_curve_joins_the_closed_loop_block(tmp_path):
    """scaling.json (hand-built points: the test is about the block) renders under the closed-loop table."""
    iv = {"estimate": 0.05, "low": 0.0, "high": 0.1}
    points = [{"domains": d, "label": label, "pass^1": iv, "single_call": iv, "multi_call": None, "diagnostics": {},
               "export": None, "train": None} for d, label in ((0, "0 (base)"), (8, "8"))]
    (tmp_path / "scaling.json").write_text(json.dumps({
        "steps": 10, "points": points, "figure": "/elsewhere/scaling.png",
        "config": {"scaling_k": 1, "batch_size": 1, "grad_accum": 4, "experience_runs": [], "scaling_points": ["8", "32"]},
        "benchmark": {"load_average": {"min": 1.0, "max": 3.0, "median": 2.0, "cpus": 2}}}))
    assert run_all.closed_loop_table(tmp_path).startswith("No closed-loop results")  # no comparison: nothing to add to
    block = run_all.scaling_block(tmp_path)
    assert "Environment-scaling curve. From `benchmarks/results/scaling.json`" in block and "median 2.0" in block
    assert "| 8 | 0 | 5.0 [0.0, 10.0] |" in block and "Not measured: 32 train domains" in block
    assert "![scaling curve](scaling.png)" in block and "# Environment-scaling" not in block


def _gpu_run(folder: Path, tokens: dict[int, float], engaged: bool, tag: str = "", params: float = 1.7e9) -> None:
    """A run folder in the shape benchmarks/gpu/run.sh leaves (figures made up: this tests the aggregation)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tag}run.log").write_text("name, memory.total [MiB], driver_version\nNVIDIA H200, 143771 MiB, 580\n"
                                          "torch 2.11 transformers 5.17 trl 1.16 deepspeed 0.19.8 accelerate 1.15\n")
    for z, tok in tokens.items():
        r = {"zero": z, "gpus": 1, "device": "NVIDIA H200", "parameters": params, "seq_len": 2048, "micro_batch": 8,
             "grad_accum": 1, "steps_timed": 25, "median_step_s": 16384 / tok, "tokens_per_s": tok,
             "mfu": tok * 1.1e10 / 989.5e12, "peak_tflops_per_gpu": 989.5, "peak_memory_gib": 60.0 + z}
        if engaged:
            r.update(engine="DeepSpeedEngine", zero_stage_engaged=z, zero_optimizer=f"Opt{z}")
        (folder / f"{tag}zero{z}.json").write_text(json.dumps(r))


def test_gpu_block_from_collected_runs_or_not_measured(tmp_path):
    """benchmarks/gpu/collect.py reduces run folders to medians per setting (read from the results, so a
    second model's tagged files stay apart; engagement counted only where recorded); the README's GPU
    block renders them, or says "Not measured" without gpu.json; a quoted CPU anchor gets its ratios."""
    from benchmarks.gpu import collect

    readme, block = _rebuilt_block(tmp_path, "gpu")
    assert "Not measured" in block and "99% MFU" not in block
    runs = tmp_path / "runs"
    _gpu_run(runs / "1", {2: 30000.0, 3: 20000.0}, engaged=False)
    _gpu_run(runs / "2", {2: 32000.0}, engaged=True)  # ZeRO-3 failed in this run: no zero3.json
    _gpu_run(runs / "3", {2: 31000.0, 3: 28000.0}, engaged=True)
    _gpu_run(runs / "3", {2: 100000.0}, engaged=True, tag="small-", params=1.35e8)  # a second model, same folder
    (tmp_path / "scaling.json").write_text(json.dumps({
        "config": {"batch_size": 1, "grad_accum": 4, "session_length": 5120, "gradient_checkpointing": True,
                   "torch_threads": 2, "bf16": True},
        "points": [{"label": "8", "train": {"tokens_per_second": 80.0}}, {"label": "all", "train": {"tokens_per_second": 120.0}},
                   {"label": "base"}]}))
    collect.main([str(runs / n) for n in "123"] + ["--date", "2026-12-04", "--commit", "abc1234", "--out", str(tmp_path),
                                                   "--cpu-anchor", str(tmp_path / "scaling.json")])
    d = json.loads((tmp_path / "gpu.json").read_text())
    big2, big3 = (d["medians"][f"1.70B, seq 2048, micro-batch 8 x accumulation 1, ZeRO-{z}"] for z in (2, 3))
    small = d["medians"]["0.14B, seq 2048, micro-batch 8 x accumulation 1, ZeRO-2"]
    assert big2["tokens_per_s"] == 31000.0 and big2["runs"] == 3 and big2["engagement_recorded"] == 2
    assert big3["tokens_per_s"] == 24000.0 and big3["runs"] == 2 and big3["zero_stage_engaged"] == [3]
    assert small["tokens_per_s"] == 100000.0 and small["runs"] == 1
    assert d["cpu_anchor"]["median"] == 100.0 and d["cpu_anchor"]["tokens_per_second"] == {"8": 80.0, "all": 120.0}
    run_all.rebuild(out_dir=tmp_path, readme=readme)
    block = _block(readme.read_text(), "gpu")
    row2 = next(ln for ln in block.splitlines() if ln.startswith("| 1.70B") and "ZeRO-2" in ln)
    assert "| 31000 | 30000-32000 |" in row2 and "stage 2, Opt2 (recorded in 2 of 3 runs)" in row2
    assert "abc1234" in block and "NVIDIA H200, 143771 MiB, 580" in block
    assert "ZeRO-3 | 2 | 24000 | 20000-28000 |" in block
    # the anchor's ratios are for the small (135M-shaped) settings only
    assert "median 100 tokens/s" in block and "ZeRO-2: 1,000x" in block and "310x" not in block
    assert "not recorded (field added after this run)" in (tmp_path / "gpu.md").read_text()
