"""Run report: funnel counted from a real workspace (shop fixture environment and its scenarios),
evaluation figures from hand-built verdicts (the test is about our report, not a model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentscaler.artifacts import load_scenarios
from agentscaler.models import GOLD_REPLAY, Trajectory, Verdict
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_jsonl
from tasks.evaluation.evaluate import eval_path, summarize
from tasks.evaluation.compare import compare
from tasks.evaluation.report import comparison_path, funnel, funnel_markdown, funnel_runs, report_markdown, write_report
from tasks.scenarios.build import build_scenarios
from tests.conftest import copy_workspace, load_shop_builder


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The shop domain with its scenarios, built once for the module."""
    ws = Workspace(tmp_path_factory.mktemp("built") / "ws")
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=4, seed=5)
    return ws.root


@pytest.fixture()
def ws(built: Path, tmp_path: Path) -> Workspace:
    """A fresh copy of the built workspace per test (each writes its own runs and reports)."""
    return copy_workspace(built, tmp_path)


def _run(ws: Workspace, run_id: str) -> None:
    scenarios = {s.id: s for s in load_scenarios(ws)}
    trajs = [Trajectory(id=f"{sid}-{k}", run_id=run_id, scenario_id=sid, domain="shop", trial=k, messages=[],
                        end_reason="user_stop",
                        verdict=Verdict(passed=(i + k) % 2 == 0, attribution="none" if (i + k) % 2 == 0 else "agent"))
             for i, sid in enumerate(sorted(scenarios)) for k in range(3)]
    atomic_write_jsonl(ws.rollout_dir(run_id) / "trajectories.jsonl", [t.model_dump() for t in trajs])
    atomic_write_json(eval_path(ws, run_id), {"run_id": run_id, "model": "m", "suite": "heldout", "split": "all",
                                              "k": 3, **summarize(trajs, scenarios, 3)})


def _training_run(ws: Workspace, run_id: str, agent_model: str, passed: int) -> int:
    """A training run (no evaluation report) of one trajectory per scenario; the first `passed` pass."""
    trajs = [Trajectory(id=f"{run_id}-{sid}", run_id=run_id, scenario_id=sid, domain="shop", messages=[],
                        end_reason="user_stop", agent_model=agent_model,
                        verdict=Verdict(passed=i < passed, attribution="none" if i < passed else "agent"))
             for i, sid in enumerate(sorted(s.id for s in load_scenarios(ws)))]
    atomic_write_jsonl(ws.rollout_dir(run_id) / "trajectories.jsonl", [t.model_dump() for t in trajs])
    return len(trajs)


def test_funnel_counts_workspace(ws: Workspace):
    _run(ws, "r1")
    c = funnel(ws, ["r1"])
    n = len(load_scenarios(ws))
    assert c["environments"] == 1 and c["scenarios"] == n > 0 and c["tools"] == 0 and c["sft_rows"] == 0
    # r1 is an evaluation (it has reports/eval-r1.json): apart from the training chain
    assert c["trajectories"] == c["verified"] == 0
    assert c["evaluation_trajectories"] == 3 * n and 0 < c["evaluation_passed"] < 3 * n


def test_funnel_keeps_origins_and_runs_apart(ws: Workspace):
    """Agent rollouts, gold replays and an evaluation in one workspace: no count mixes them unlabelled."""
    _run(ws, "eval1")
    n = _training_run(ws, "collect1", "smollm2-135m", passed=1)
    _training_run(ws, "gold-replay", GOLD_REPLAY, passed=n)
    c = funnel(ws)
    assert c["trajectories"] == 2 * n and (c["trajectories_agent"], c["trajectories_gold_replay"]) == (n, n)
    assert (c["verified"], c["verified_agent"], c["verified_gold_replay"]) == (n + 1, 1, n)
    assert c["evaluation_trajectories"] == 3 * n
    runs = {r["run"]: r for r in funnel_runs(ws)}
    assert {r: runs[r]["kind"] for r in runs} == {"eval1": "evaluation", "collect1": "collection",
                                                  "gold-replay": "gold replay"}
    assert runs["collect1"]["passed_agent"] == 1 and runs["gold-replay"]["passed_gold_replay"] == n
    md = funnel_markdown(c, list(runs.values()))
    assert f"| trajectories | {2 * n} | {n} | {n} |" in md and f"| verified | {n + 1} | 1 | {n} |" in md
    assert "Evaluation runs (not training data" in md and "| `eval1` | evaluation |" in md


def test_report_holds_before_and_after_with_the_scenarios(ws: Workspace):
    """The demo's report: both evaluations side by side, on the scenarios they used, each in detail."""
    _run(ws, "base")
    _run(ws, "trained")
    for rid in ("base", "trained"):  # what evaluate_run records
        rep = json.loads(eval_path(ws, rid).read_text())
        rep["scenario_ids"] = sorted(s.id for s in load_scenarios(ws))
        atomic_write_json(eval_path(ws, rid), rep)
    out = write_report(ws, None, {"before: base model": "base", "after: trained model": "trained"})
    md = (ws.reports_dir / "workspace" / "report.md").read_text()
    assert out["has_eval"] and out["evaluations"] == {"before: base model": "base", "after: trained model": "trained"}
    assert "## Evaluation: before and after" in md and "Both evaluations ran on the same scenarios." in md
    assert "| before: base model |" in md and "| after: trained model |" in md
    for s in load_scenarios(ws):
        assert f"| `{s.id}` | shop |" in md
    assert "### before: base model" in md and "### after: trained model" in md
    assert {"passk_0", "passk_1"} <= set(out["images"])


def test_report_shows_the_demos_comparison_once(ws: Workspace):
    """The pipeline writes comparison-pipeline.json for the same two runs the demo's before/after section
    shows: its intervals go inside that section, and no second "Base vs trained" section repeats it."""
    _run(ws, "base")
    _run(ws, "trained")
    evals = {rid: json.loads(eval_path(ws, rid).read_text()) for rid in ("base", "trained")}
    atomic_write_json(comparison_path(ws, "pipeline"), compare(evals["base"], evals["trained"]))
    write_report(ws, None, {"before: base model": "base", "after: trained model": "trained"})
    md = (ws.reports_dir / "workspace" / "report.md").read_text()
    assert md.count("### Paired comparison with 95% intervals") == 1 and "## Base vs trained" not in md
    # a comparison of other runs is still its own section
    atomic_write_json(comparison_path(ws, "other"), {**compare(evals["base"], evals["trained"]), "base_run": "x"})
    write_report(ws, None, {"before: base model": "base", "after: trained model": "trained"})
    md = (ws.reports_dir / "workspace" / "report.md").read_text()
    assert md.count("## Base vs trained: other") == 1 and "## Base vs trained: pipeline" not in md


def test_write_report_with_eval(ws: Workspace):
    _run(ws, "r1")
    out = write_report(ws, "r1")
    md = (ws.reports_dir / "r1" / "report.md").read_text()
    assert out["has_eval"] and "pass^3" in md and "## Funnel" in md and "accuracy vs calls" in md
    for name in ("funnel", "domain_sizes", "passk", "by_calls"):
        assert open(out["images"][name], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    html = (ws.reports_dir / "r1" / "report.html").read_text()
    assert "<table>" in html and 'src="passk.png"' in html


def test_report_without_eval_and_markdown_function(ws: Workspace):
    out = write_report(ws, None)
    assert not out["has_eval"] and "passk" not in out["images"]
    md = report_markdown("x", {"tools": 3, "domains": 1}, [3, 5], None,
                         bfcl=[{"category": "simple_python", "model": "m", "items": 8, "accuracy": 0.75}],
                         contamination={"flagged": 2, "scenarios": 9, "params": {"intent_threshold": 0.92}})
    assert "| tools | 3 |" in md and "min 3, median 5, max 5" in md and "## Evaluation" not in md
    assert "| simple_python | m | auto | 8 | 75.0% |" in md and "2 of 9 scenarios flagged" in md


def test_funnel_counts_reads_discovery_shared_and_unobservable_writes(tmp_path):
    """graph/domains.json as tasks.discover.observers writes it: shared reads and unobservable writes
    are counted in the funnel and said under its table."""
    ws = Workspace(tmp_path / "ws2")
    atomic_write_json(ws.domains_path, [
        {"domain": "d1", "tools": ["a", "b", "r"], "names": ["a", "b", "r"], "edges": [],
         "shared": [{"tool": "r", "name": "r", "entity": "session", "for_writes": ["a"], "weight": 0.7,
                     "reason": "read about session"}],
         "unobservable": [{"name": "b", "entity": "vehicle", "why": "no read in the corpus"}]},
        {"domain": "d2", "tools": ["r", "s"], "names": ["r", "s"], "edges": []}])
    c = funnel(ws)
    assert (c["domains"], c["reads_shared"], c["writes_unobservable_in_corpus"]) == (2, 1, 1)
    assert "Discovery shared 1 reads" in funnel_markdown(c)


def test_scaling_report_of_a_partial_curve_names_the_missing_points(tmp_path):
    """Points as flows/closed_loop.scaling_curve writes them (hand-built figures: the test is about the report)."""
    from tasks.evaluation.report import plot_scaling, scaling_markdown

    iv = {"estimate": 0.05, "low": 0.01, "high": 0.1}
    points = [{"domains": d, "label": label, "pass^1": iv, "single_call": iv, "multi_call": None, "diagnostics": {},
               "export": None, "train": None} for d, label in ((0, "0 (base)"), (8, "8"), (160, "all (160)"))]
    points[2].update(checkpoint="the main run's (learning rate on the clock)", model="smollm2-135m-sft-c4161fd4")
    out = {"steps": 10, "points": points, "figure": str(plot_scaling(points, tmp_path / "scaling.png")),
           "config": {"scaling_k": 1, "batch_size": 1, "grad_accum": 4, "experience_runs": [],
                      "scaling_points": ["8", "32", "all", "128"]}}
    md = scaling_markdown(out)
    assert "| 8 | 0 | 5.0 [1.0, 10.0] |" in md and "Not measured: 32, 128 train domains" in md
    assert "the agent at the server's default repetition penalty (llama-cpp-python: 1.1)" in md  # a config from before
    out["config"]["repeat_penalty"] = 1.0
    assert "the agent at repetition penalty 1 (none))" in scaling_markdown(out)
    del out["config"]["repeat_penalty"]
    assert "by reason" not in md  # no point recorded its reasons
    points[1].update(reasons={"call_mismatch": 3, "repetition": 9}, train={"last_loss": 0.02, "epochs": 2.857})
    points[2]["reasons"] = {"call_mismatch": 5}
    md = scaling_markdown(out)
    assert "| 0.020 | 2.86 |" in md
    assert ("| train domains | repetition | call_mismatch |" in md and "| 0 (base) | n/a | n/a |" in md
            and "| 8 | 9 | 3 |" in md and "| all (160) | 0 | 5 |" in md and "stop-when-failed" not in md)
    out["config"]["stop_when_failed"] = True
    assert "ended once their failure was settled (`--stop-when-failed`)" in scaling_markdown(out)
    assert ("Point all (160): the checkpoint of the main run of that time (smollm2-135m-sft-c4161fd4)" in md
            and "ran on the clock" in md and (tmp_path / "scaling.png").stat().st_size > 1000)
    assert "more domains, more data" in md and "equal data" not in md
    assert "rows (one conversation each)" in md  # no session_length in this config
    out["config"]["session_length"] = 5120
    assert "the same learning rate, sessions of up to 5120 tokens and data recipe" in scaling_markdown(out)
    out["config"]["scaling_conversations"] = 600
    assert "equal data: each point's train split cut to 600 conversations" in scaling_markdown(out)
    assert "packs more of its conversations" not in scaling_markdown(out)  # no point joined sessions
    points[1]["export"] = {"conversations_by_origin": {"train": {"gold-replay": 100}}, "session_length": 5120,
                           "capped": {"cap": 100, "domains_before": 7, "domains_after": 7}}
    md = scaling_markdown(out)
    assert "| 8 | 100 from 7 domains | 5.0 [1.0, 10.0] |" in md and "packs more of its conversations into a row" in md


def test_scaling_report_shows_the_curves_paired_differences_and_verdict(tmp_path):
    """Hand-built points with per-scenario counts (the test is about the report's rendering)."""
    from tasks.evaluation.compare import curve_differences
    from tasks.evaluation.report import scaling_markdown

    iv = {"estimate": 0.05, "low": 0.01, "high": 0.1}
    points = [{"domains": d, "label": str(d), "pass^1": iv, "single_call": iv, "multi_call": iv, "diagnostics": {},
               "scenario_counts": {f"s{i}": [1, int(i < p)] for i in range(50)}} for d, p in ((8, 20), (32, 10), (128, 5))]
    out = {"steps": 10, "points": points, "figure": str(tmp_path / "scaling.png"), "differences": curve_differences(points),
           "config": {"scaling_k": 1, "batch_size": 1, "grad_accum": 4, "experience_runs": [], "scaling_points": []}}
    points[0]["diagnostics"] = {"right_first_tool": 30, "right_first_call": 21}
    md = scaling_markdown(out)
    assert "| 30 | 21 | n/a | n/a |" in md  # right first tool, right first call (arguments too), no training record
    assert "| 8 -> 32 | -20.0 [" in md and "| 32 -> 128 | -10.0 [" in md and "| 8 -> 128 | -30.0 [" in md
    assert "Verdict: the curve **falls**" in md
    out["differences"] = {**out["differences"], "verdict": "flat"}
    assert "Verdict: the curve is **flat** (no difference beyond the noise)" in scaling_markdown(out)
    out["differences"] = curve_differences(points)
    assert "First calls that named the first gold tool" not in md  # no point counted its argument errors
    points[0]["diagnostics"]["first_call_arguments"] = {"missing": 2, "empty_value": 0, "wrong_value": 7, "extra": 1}
    points[1]["diagnostics"] = {"right_first_tool": 12, "right_first_call": 12, "first_call_arguments": {
        "missing": 0, "empty_value": 0, "wrong_value": 0, "extra": 0, "values_stated": 0}}
    md = scaling_markdown(out)
    points[1]["diagnostics"]["text_match_first_tool"] = 45
    md = scaling_markdown(out)
    assert ("| train domains | text match: right first tool | right first tool | right first call | other arguments "
            "| missing | empty value | wrong value | extra | values stated |" in md)
    assert "| 8 | n/a | 30 | 21 | 9 | 2 | 0 | 7 | 1 | n/a |" in md  # counted before values_stated and text match were
    assert "| 32 | 45 | 12 | 12 | 0 | 0 | 0 | 0 | 0 | 0 |" in md
    assert "| 128 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |" in md
    out["differences"] = None  # a results file written before the curve kept its counts
    assert "Paired differences" not in scaling_markdown(out)
