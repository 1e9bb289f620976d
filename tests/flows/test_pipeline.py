"""The whole pipeline as one real Prefect run (test harness) on a small real corpus.

The agent endpoint is *scripted* (benchmarks/scripted_llm.py in oracle mode: a real HTTP server
that replays each scenario's gold calls), because this test is about the orchestration, the
data handed from stage to stage and the funnel, not about a model's skill. Training is real (two
optimizer steps of the tiny model per stage); evaluation runs the same endpoint on held-out scenarios.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentscaler.catalog import Catalog
from agentscaler.workspace import Workspace
from tests.scripted_endpoint import scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "corpora"


def oracle_endpoint(ws: Workspace):
    return scripted_endpoint("oracle", scenarios_glob=str(ws.root / "domains" / "*" / "scenarios.jsonl"))


@pytest.mark.slow
def test_pipeline_end_to_end(tmp_path: Path, prefect_harness):
    from flows.pipeline import pipeline_flow

    ws = Workspace(tmp_path / "ws")
    sources = [str(DATA / name) for name in ("bfcl", "openai", "toolbench", "xlam")]
    with oracle_endpoint(ws) as url:
        summary = pipeline_flow(str(ws.root), sources=sources, per_domain=4, llm=url, model="scripted",
                                tau2_verticals=False, trials=1, train=True, train_model="tiny", max_steps=2,
                                train_config_dir="cpu-demo", evaluate=True, k=2, eval_max_scenarios=4)
    funnel = summary["funnel"]
    assert funnel["tools"] > 5 and funnel["domains"] >= 1 and funnel["environments"] == funnel["domains"]
    assert funnel["scenarios"] > 0 and funnel["trajectories"] > 0
    # The oracle replays gold calls, so the verifier must accept (nearly) all of its trajectories.
    assert funnel["verified"] >= 0.8 * funnel["trajectories"]
    assert funnel["sft_rows"] > 0
    assert summary["failed"] == {} and summary["failures"] == {}
    # every stage that ran has its wall time (the demo's per-stage figures, benchmarks/bench_demo.py)
    assert set(summary["stage_wall_s"]) == {"ingest", "discover", "build", "collect", "train", "evaluate_base"}
    assert all(v > 0 for v in summary["stage_wall_s"].values())
    # origins and runs kept apart: the oracle is agent experience; the evaluation is not in the chain
    assert funnel["trajectories_agent"] == funnel["trajectories"] and funnel["trajectories_gold_replay"] == 0
    assert funnel["sft_rows_agent"] == funnel["sft_rows"]
    assert {r["kind"] for r in summary["funnel_runs"]} == {"collection"}
    # the train flow screened the scenarios before it exported (cached by content)
    assert summary["train"]["contamination"]["scenarios"] == funnel["scenarios"]
    st1 = summary["train"]["train"]["stage1"]
    assert st1["global_step"] == 2 and st1["loss_finite"]
    assert "pass^k" in summary["evaluate"]
    # the report holds the evaluation with the scenarios it ran on
    from tasks.evaluation.report import write_report

    rid = summary["evaluate"]["run_id"]
    rep = write_report(ws, None, {"before: base model": rid})
    md = Path(rep["markdown"]).read_text()
    assert "## Evaluation: before and after" in md and rep["evaluations"] == {"before: base model": rid}
    used = json.loads((ws.reports_dir / f"eval-{rid}.json").read_text())["scenario_ids"]
    assert used and all(f"| `{sid}` |" in md for sid in used)
    # Every stage left its status in the catalog; the run itself is recorded as done.
    catalog = Catalog(ws.catalog_path)
    assert catalog.domain_summary()["counts"].get("failed", 0) == 0
    runs = {r["flow"]: r["status"] for r in catalog.runs()}
    assert runs["pipeline"] == "done"
    assert (ws.sft_dir / "stage1" / "train.parquet").exists()
    report = json.loads((ws.sft_dir / "stage1" / "report.json").read_text())
    assert report["rows"]["train"] > 0

    # Re-running training on the same data resumes past the finished stage instead of retraining.
    from flows.train_sft import train_sft_flow

    again = train_sft_flow(str(ws.root), max_steps=2, config_dir="cpu-demo", model="tiny")
    assert again["train"]["stage1"].get("skipped_finished") is True
    assert again["train"]["stage1"]["final_dir"] == st1["final_dir"]
    # the flow trained under its stage key: a killed stage would resume from its checkpoints, which a
    # finished one no longer keeps (training/resume.py)
    out = Path(st1["final_dir"]).parent
    assert json.loads((out / "resume.json").read_text())["key"] == st1["key"] and not list(out.glob("checkpoint-*"))



@pytest.mark.slow
def test_local_comparison_is_the_closed_loops(tmp_path: Path):
    """With a local model trained, the pipeline (and so the demo) scores base and trained the closed loop's
    way (flows/closed_loop.evaluate_model and compare: the same llama.cpp runtime, two one-thread servers,
    the same evaluation set) and records each stage's wall and CPU seconds. The tiny model is untrained
    noise served as both "base" and "trained" (two names, two runs): the test is about the plumbing,
    not pass rates."""
    from agentscaler import progress
    from flows.closed_loop import base_checkpoint
    from flows.pipeline import EVAL_SET, _closed_loop_comparison, closed_loop_table
    from tasks.evaluation.eval_set import choose_eval_set
    from tasks.evaluation.report import comparison_path
    from tasks.scenarios.build import build_scenarios
    from tests.conftest import load_shop_builder

    ws = Workspace(tmp_path / "ws")
    load_shop_builder()(ws.domain_dir("shopheld"))
    build_scenarios(ws, "shopheld", per_domain=4, seed=0, heldout_fraction=1.0)
    choose_eval_set(ws, scenarios=2, min_domains=1, max_domains=1, max_prompt_tokens=4096, name=EVAL_SET)
    ckpt = base_checkpoint(ws, "tiny")
    summary = {"train": {"train": {"stage1": {"key": "0123456789abcdef", "final_dir": str(ckpt)}}}}
    with progress.stage("pipeline", total=2, unit="stages") as bar:
        _closed_loop_comparison(ws, summary, bar, ckpt, "tiny", k=1, max_turns=1, agent_steps=1, max_tokens=24)
    base, trained = summary["evaluate"], summary["evaluate_trained"]
    assert base["model"] == "tiny-base" and trained["model"] == "tiny-sft-01234567"  # named by the training key
    assert base["servers"] == trained["servers"] == 2
    assert base["scenario_ids"] == trained["scenario_ids"] and len(base["scenario_ids"]) == 2
    cmp = summary["comparison"]
    assert cmp["same_scenarios"] and set(cmp["groups"]) == {"overall", "single_call", "multi_call"}
    assert json.loads(comparison_path(ws, "pipeline").read_text()) == cmp
    assert summary["evaluation_cost"]["base"]["conversations"] == 2
    assert set(closed_loop_table(summary)) == {"baseline", "trained"}
    # wall and CPU seconds per stage; the CPU includes the model servers (children reaped in the stage)
    assert set(summary["stage_wall_s"]) == set(summary["stage_cpu_s"]) == {"evaluate_base", "evaluate_trained"}
    assert all(v > 0 for v in summary["stage_cpu_s"].values())


def test_pipeline_until_build_stops_before_any_model(tmp_path: Path, prefect_harness):
    """`agentscaler run --until build`: ingest, discover and build in one process (Prefect starts
    once), nothing after: no rollout, training or evaluation run is recorded; an unknown stage
    fails before any work."""
    from flows.pipeline import pipeline_flow

    ws = Workspace(tmp_path / "ws")
    with pytest.raises(ValueError, match="until='rollouts'"):
        pipeline_flow(str(ws.root), sources=[str(DATA / "toolbench")], until="rollouts")
    assert not ws.catalog_path.exists()
    summary = pipeline_flow(str(ws.root), sources=[str(DATA / "bfcl"), str(DATA / "toolbench")], per_domain=3,
                            tau2_verticals=False, until="build")
    assert set(summary["stage_wall_s"]) == {"ingest", "discover", "build"}
    assert summary["build"]["built"] == summary["discover"]["domains"] > 0 and summary["failed"] == {}
    assert summary["build"]["scenarios"] > 0
    flows = {r["flow"] for r in Catalog(ws.catalog_path).runs()}
    assert flows == {"pipeline", "ingest", "discover", "build_environments"}, flows
