"""Run report: funnel counted from a real workspace (shop fixture environment and its scenarios),
evaluation figures from hand-built verdicts (the test is about our report, not a model)."""

from __future__ import annotations

import pytest

from agentscaler.artifacts import load_scenarios
from agentscaler.models import Trajectory, Verdict
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_jsonl
from tasks.evaluation.evaluate import eval_path, summarize
from tasks.evaluation.report import funnel, report_markdown, write_report
from tasks.scenarios.build import build_scenarios
from tests.conftest import load_shop_builder


@pytest.fixture()
def ws(tmp_path) -> Workspace:
    ws = Workspace(tmp_path / "ws")
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=4, seed=5)
    return ws


def _run(ws: Workspace, run_id: str) -> None:
    scenarios = {s.id: s for s in load_scenarios(ws)}
    trajs = [Trajectory(id=f"{sid}-{k}", run_id=run_id, scenario_id=sid, domain="shop", trial=k, messages=[],
                        end_reason="user_stop",
                        verdict=Verdict(passed=(i + k) % 2 == 0, attribution="none" if (i + k) % 2 == 0 else "agent"))
             for i, sid in enumerate(sorted(scenarios)) for k in range(3)]
    atomic_write_jsonl(ws.rollout_dir(run_id) / "trajectories.jsonl", [t.model_dump() for t in trajs])
    atomic_write_json(eval_path(ws, run_id), {"run_id": run_id, "model": "m", "suite": "heldout", "split": "all",
                                              "k": 3, **summarize(trajs, scenarios, 3)})


def test_funnel_counts_workspace(ws: Workspace):
    _run(ws, "r1")
    c = funnel(ws, ["r1"])
    n = len(load_scenarios(ws))
    assert c["environments"] == 1 and c["scenarios"] == n > 0
    assert c["trajectories"] == 3 * n and 0 < c["verified"] < 3 * n and c["tools"] == 0 and c["sft_rows"] == 0
    # agent experience and gold replays counted apart (no gold run here)
    assert c["trajectories_experience"] == 3 * n and c["verified_experience"] == c["verified"]
    assert c["trajectories_gold_replay"] == c["verified_gold_replay"] == c["sft_rows_gold_replay"] == 0


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
    assert "| tools | 3 |" in md and "min 3, median 5, max 5" in md and "Evaluation" not in md
    assert "| simple_python | m | auto | 8 | 75.0% |" in md and "2 of 9 scenarios flagged" in md
