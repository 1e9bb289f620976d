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

