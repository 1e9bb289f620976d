"""`collect --samples N` (rejection sampling) as a real Prefect run, through the SFT export and the funnel.

The agent endpoint is *scripted* (benchmarks/scripted_llm.py in coin mode: a perfect agent on even
samples, a chatty one on odd samples), because this test is about our own bookkeeping: N samples per
train-split scenario at a temperature > 0, held-out scenarios never sampled, acceptance per domain
and per scenario length, and agent experience kept apart from gold replays in every count and row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agentscaler.artifacts import load_scenarios, load_trajectories
from agentscaler.models import GOLD_REPLAY
from agentscaler.workspace import Workspace
from tasks.evaluation.contamination import check_contamination
from tasks.scenarios.build import build_scenarios
from tests.conftest import copy_workspace, load_shop_builder
from tests.scripted_endpoint import scripted_endpoint


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The two domains with their scenarios, built once for the module."""
    ws = Workspace(tmp_path_factory.mktemp("built") / "ws")
    for d in ("shop", "shopb"):  # domain_split: "shop" is a train domain, "shopb" a held-out one
        load_shop_builder()(ws.domain_dir(d))
        build_scenarios(ws, d, per_domain=6, seed=3)
    return ws.root


@pytest.fixture()
def ws(built: Path, tmp_path: Path) -> Workspace:
    """A fresh copy of the built workspace per test (each writes its own runs, or must find none)."""
    return copy_workspace(built, tmp_path)


def test_rejection_sampling_collects_labels_and_counts_apart(ws, prefect_harness):
    from flows.closed_loop import gold_replay_run
    from flows.collect_experience import collect_experience_flow
    from tasks.evaluation.report import funnel
    from tasks.sft.export import export_sft

    train = [s for s in load_scenarios(ws, "shop") if s.split == "train"]
    assert train and all(s.split == "heldout" for s in load_scenarios(ws, "shopb"))
    glob = str(ws.root / "domains" / "*" / "scenarios.jsonl")
    with scripted_endpoint("coin", scenarios_glob=glob) as url:
        out = collect_experience_flow(str(ws.root), llm=url, model="scripted-agent", samples=2, max_turns=2)
        with pytest.raises(ValueError, match="train split"):
            collect_experience_flow(str(ws.root), llm=url, model="scripted-agent", samples=2, split="heldout")

    assert out["samples"] == 2 and out["temperature"] > 0
    assert out["domains"] == 1 and out["trajectories"] == 2 * len(train)  # held-out domain never sampled
    trajs = [t for r in out["run_ids"] for t in load_trajectories(ws, r)]
    assert {t.domain for t in trajs} == {"shop"} and {t.agent_model for t in trajs} == {"scripted-agent"}
    assert sorted(t.trial for t in trajs) == sorted([0, 1] * len(train))
    acc = out["acceptance"]
    assert acc["overall"] == {"samples": 2 * len(train), "accepted": len(train), "rate": 0.5,
                              "scenarios": len(train), "scenarios_accepted": len(train)}
    assert set(acc["by_domain"]) == {"shop"} and acc["agent_models"] == ["scripted-agent"]
    lengths = {str(len(s.gold_calls)) for s in train}
    assert set(acc["by_length"]) == lengths
    assert sum(c["samples"] for c in acc["by_length"].values()) == 2 * len(train)

    gold = gold_replay_run(ws, ["shop"])
    check_contamination(ws, sources=("tau2",))  # the export refuses unscreened scenarios
    report = export_sft(ws, stages=(1,), max_length=4096)
    exp = report["by_origin"]["agent"]
    # the accepted half; the scripted oracle writes exactly what gold replay writes, so the agent's
    # copies of gold replays are dropped as duplicates (whichever run is read first keeps the row)
    assert exp.get("kept", 0) + exp.get("dropped_duplicate", 0) == len(train)
    assert report["by_origin"]["agent"]["skipped_unverified"] == len(train)
    assert report["by_origin"][GOLD_REPLAY]["read"] == gold["written"]
    rows = pq.read_table(ws.sft_dir / "stage1" / "train.parquet").to_pylist() + \
        pq.read_table(ws.sft_dir / "stage1" / "eval.parquet").to_pylist()
    assert {(GOLD_REPLAY, GOLD_REPLAY)} <= {(r["origin"], r["agent_model"]) for r in rows} <= \
        {("agent", "scripted-agent"), (GOLD_REPLAY, GOLD_REPLAY)}
    alone = export_sft(ws, stages=(1,), max_length=4096, run_ids=out["run_ids"], out_dir=ws.root / "agent-only")
    assert alone["by_origin"]["agent"]["kept"] == len(train)  # the accepted samples, labelled as experience
    agent_rows = pq.read_table(ws.root / "agent-only" / "stage1" / "train.parquet").to_pylist() + \
        pq.read_table(ws.root / "agent-only" / "stage1" / "eval.parquet").to_pylist()
    assert {(r["origin"], r["agent_model"]) for r in agent_rows} == {("agent", "scripted-agent")}
    f = funnel(ws, [*out["run_ids"], gold["run_id"]])
    assert f["trajectories_agent"] == 2 * len(train) and f["verified_agent"] == len(train)
    assert f["sft_rows_agent"] == exp.get("kept", 0)
    assert f["trajectories_gold_replay"] == gold["written"]
    assert f["sft_rows_agent"] + f["sft_rows_gold_replay"] == f["sft_rows"] == len(rows)
    assert json.loads((ws.sft_dir / "report.json").read_text())["kept_by_origin"]["stage1"]


@pytest.mark.parametrize("args", [["--samples", "2", "--split", "heldout"], ["--samples", "0"]])
def test_cli_collect_refuses_held_out_or_no_samples(ws, args):
    """The command line refuses before any flow runs (no run record, no rollouts written)."""
    from typer.testing import CliRunner

    from flows.cli import app

    res = CliRunner().invoke(app, ["-w", str(ws.root), "collect", "--llm", "http://127.0.0.1:9", *args, "--json"])
    assert res.exit_code == 2 and "needs N >= 1 and the train split" in res.output, res.output
    assert not any((ws.root / "rollouts").iterdir())
