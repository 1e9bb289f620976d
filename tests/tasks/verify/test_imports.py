"""`agentscaler verify --import FILE.jsonl`: OpenAI-format trajectories from elsewhere, matched to the
workspace's scenarios and verified like our own runs (real sandbox replay, shop fixture; the
dialogues are gold replays recorded for real, then written as another framework would)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentscaler.artifacts import SCENARIOS, TRAJECTORIES, load_scenarios, load_trajectories
from agentscaler.models import Trajectory
from agentscaler.workspace import Workspace
from envs.episode import Environment
from flows.cli import app
from tasks.rollouts.gold import gold_trajectory
from tasks.scenarios.build import build_scenarios
from tasks.verify.imports import REJECTIONS, import_run
from tasks.verify.verify import verify_run
from tests.conftest import load_shop_builder


@pytest.fixture(scope="module")
def golds(ws: Workspace) -> list[Trajectory]:
    with Environment.open(ws.domain_dir("shop")) as env:
        return [gold_trajectory(s, env, env.tools(), "You are an agent.", "native") for s in load_scenarios(ws, "shop")]


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_rows_matched_by_id_or_by_intent_get_the_verdicts_of_a_native_run(ws: Workspace, golds: list[Trajectory],
                                                                          tmp_path: Path) -> None:
    native = [t.model_copy(deep=True, update={"run_id": "native"}) for t in golds]
    native[1].messages[3]["content"] = '{"forged": true}'  # a forged tool output
    native[2].final_hash = "f" * 32  # a forged recorded state
    native[3].messages = native[3].messages[:-1]  # never ended by the user's stop
    native[3].end_reason = "turn_limit"
    run = ws.rollout_dir("native")
    run.mkdir(parents=True, exist_ok=True)
    (run / TRAJECTORIES).write_text("".join(t.model_dump_json() + "\n" for t in native))
    verify_run(ws, "native")
    want = {t.scenario_id: t.verdict for t in load_trajectories(ws, "native")}

    rows = []
    for i, t in enumerate(native):
        msgs = [dict(m) for m in t.messages]
        if i % 3 == 0:
            row = {"scenario_id": t.scenario_id}
        elif i % 3 == 1:  # domain + intent, spaced and cased differently
            row = {"domain": "shop", "intent": "  " + msgs[1]["content"].upper() + " "}
        else:  # domain only: the intent is the first user message; content as text parts
            row = {"domain": "shop"}
            msgs = [{**m, "content": [{"type": "text", "text": m["content"]}]} if m["role"] in ("user", "tool") else m
                    for m in msgs]
        if t.final_hash and i == 2:
            row["final_hash"] = t.final_hash
        rows.append({**row, "id": f"row{i}", "agent_model": "other-framework", "messages": msgs})
    summary = import_run(ws, _write(tmp_path / "in.jsonl", rows))
    assert summary["matched"] == len(rows) and sum(summary["rejected"].values()) == 0
    rep = verify_run(ws, summary["run_id"])
    got = load_trajectories(ws, summary["run_id"])
    assert {t.scenario_id: t.verdict for t in got} == want
    assert rep["passed"] == sum(v.passed for v in want.values()) == len(rows) - 3
    assert {t.agent_model for t in got} == {"other-framework"} and {t.user_kind for t in got} == {"imported"}
    assert want[native[1].scenario_id].reasons == ["output_mismatch"]
    assert want[native[2].scenario_id].reasons == ["recorded_state_mismatch"]
    assert want[native[3].scenario_id].reasons == ["turn_limit"]


def test_rows_that_match_no_scenario_are_rejected_with_a_reason(ws: Workspace, golds: list[Trajectory],
                                                               tmp_path: Path) -> None:
    t = golds[0]
    ok = {"scenario_id": t.scenario_id, "messages": t.messages}
    rows = ["{not json", [1, 2], {"scenario_id": t.scenario_id}, {"scenario_id": "nope", "messages": t.messages},
            {"scenario_id": t.scenario_id, "domain": "elsewhere", "messages": t.messages},
            {"domain": "elsewhere", "messages": t.messages},
            {"domain": "shop", "intent": "please do something else entirely", "messages": t.messages},
            {"domain": "shop", "messages": [{"role": "assistant", "content": "hi"}]},
            {**ok, "end_reason": "finished"}, ok, ""]
    summary = import_run(ws, _write(tmp_path / "bad.jsonl", rows), run_id="import-bad")
    assert summary["rows"] == 10 and summary["matched"] == 1
    assert [r["reason"] for r in summary["rejected_rows"]] == [
        "unreadable", "not_an_object", "no_messages", "unknown_scenario", "domain_mismatch", "unknown_domain",
        "no_matching_scenario", "no_intent", "bad_end_reason"]
    assert [r["line"] for r in summary["rejected_rows"]] == list(range(1, 10))
    assert set(summary["rejected"]) == set(REJECTIONS)
    saved = json.loads((ws.rollout_dir("import-bad") / "import.json").read_text())
    assert saved["rejected"] == summary["rejected"]
    assert verify_run(ws, "import-bad")["passed"] == 1


def test_an_intent_shared_by_two_scenarios_is_ambiguous(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=3, seed=1)
    path = ws.domain_dir("shop") / SCENARIOS
    first = json.loads(path.read_text().splitlines()[0])
    path.write_text(path.read_text() + json.dumps({**first, "id": "twin"}) + "\n")
    row = {"domain": "shop", "messages": [{"role": "user", "content": first["intent"]}]}
    summary = import_run(ws, _write(tmp_path / "a.jsonl", [row]))
    assert summary["rejected"]["ambiguous_scenario"] == 1 and summary["matched"] == 0
    assert verify_run(ws, summary["run_id"])["trajectories"] == 0


def test_cli_verify_import(ws: Workspace, golds: list[Trajectory], tmp_path: Path) -> None:
    rows = [{"scenario_id": t.scenario_id, "messages": t.messages} for t in golds[:3]] + [{"domain": "nowhere",
                                                                                           "messages": []}]
    res = CliRunner().invoke(app, ["-w", str(ws.root), "verify", "--import", str(_write(tmp_path / "c.jsonl", rows)),
                                   "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["trajectories"] == 3 and out["passed"] == 3 and out["run_id"].startswith("import-")
    assert out["import"]["matched"] == 3 and out["import"]["rejected"]["no_messages"] == 1
    assert out["replay"]["trajectories"] == 3
    verified = (ws.rollout_dir(out["run_id"]) / "verified.jsonl").read_bytes()
    res = CliRunner().invoke(app, ["-w", str(ws.root), "verify", "--run", out["run_id"], "--processes", "2", "--json"])
    assert res.exit_code == 0, res.output
    two = json.loads(res.stdout)  # two verifier processes: the same verdicts and files
    assert {k: two[k] for k in ("trajectories", "passed", "reasons")} == {k: out[k] for k in ("trajectories", "passed",
                                                                                             "reasons")}
    assert (ws.rollout_dir(out["run_id"]) / "verified.jsonl").read_bytes() == verified
    res = CliRunner().invoke(app, ["-w", str(ws.root), "verify", "--import", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 1


def test_an_import_never_overwrites_another_run(ws: Workspace, golds: list[Trajectory], tmp_path: Path) -> None:
    native = ws.rollout_dir("kept")
    native.mkdir(parents=True)
    (native / TRAJECTORIES).write_text("".join(t.model_dump_json() + "\n" for t in golds[:2]))
    first = _write(tmp_path / "first.jsonl", [{"scenario_id": golds[0].scenario_id, "messages": golds[0].messages}])
    with pytest.raises(FileExistsError, match="kept"):
        import_run(ws, first, "kept")
    assert len(load_trajectories(ws, "kept")) == 2
    assert import_run(ws, first, "mine")["matched"] == 1
    assert import_run(ws, first, "mine")["matched"] == 1  # the same file again: replaced, not duplicated
    assert len(load_trajectories(ws, "mine")) == 1
    second = _write(tmp_path / "second.jsonl", [{"scenario_id": golds[1].scenario_id, "messages": golds[1].messages}])
    with pytest.raises(FileExistsError):
        import_run(ws, second, "mine")
    res = CliRunner().invoke(app, ["-w", str(ws.root), "verify", "--import", str(second), "--run", "kept"])
    assert res.exit_code == 1 and "already holds" in res.output
