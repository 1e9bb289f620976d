"""Held-out evaluation. `summarize` is tested on hand-built verdicts (our arithmetic); the end-to-end
tests run the real rollout engine against the *scripted* OpenAI-compatible endpoint
(benchmarks/scripted_llm.py: an oracle agent that calls the gold calls, or a chatty one that never
calls a tool; not a model: these tests are about our evaluation plumbing). One `-m llm` test runs
the real local SmolLM2 server."""

from __future__ import annotations

import json
import os

import pytest

from agentscaler.models import GoldCall, Scenario, Trajectory, Verdict
from agentscaler.workspace import Workspace
from tasks.evaluation.evaluate import (argument_errors, diagnose, diagnostics, eval_path, evaluate, run_diagnostics,
                                      summarize, text_match_tool, values_stated)
from tasks.rollouts.conversation import RolloutConfig
from tasks.scenarios.build import build_scenarios
from tests.conftest import load_shop_builder
from tests.scripted_endpoint import scripted_endpoint

UNSAFE = os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("evaluate"))
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=4, seed=5)
    return ws


def scripted(ws: Workspace, mode: str, domain: str = "shop"):
    return scripted_endpoint(mode, [ws.domain_dir(domain) / "scenarios.jsonl"])


def _sc(sid: str, n_calls: int) -> Scenario:
    return Scenario(id=sid, domain="d1", read_only=False, intent="x", gold_hash="g", seed_hash="s",
                    gold_calls=[GoldCall(name="f", arguments={}) for _ in range(n_calls)])


def _tr(sid: str, trial: int, passed: bool, attribution: str = "agent") -> Trajectory:
    return Trajectory(id=f"{sid}{trial}", run_id="r", scenario_id=sid, domain="d1", trial=trial, messages=[],
                      end_reason="user_stop", verdict=Verdict(passed=passed, attribution="none" if passed else attribution,
                                                              reasons=[] if passed else ["state_mismatch"]))


def test_summarize_passk_by_calls_and_attribution():
    scenarios = {"a": _sc("a", 1), "b": _sc("b", 3)}
    trajs = [_tr("a", i, i < 2) for i in range(4)] + [_tr("b", i, True) for i in range(4)]
    trajs.append(_tr("b", 4, False, attribution="user"))  # the user's fault: out of pass^k, in pass^k_raw
    s = summarize(trajs, scenarios, k=4)
    pk = s["pass^k"]["overall"]["pass^k"]
    assert pk["1"] == pytest.approx((0.5 + 1.0) / 2)
    assert pk["2"] == pytest.approx((1 / 6 + 1.0) / 2)  # C(2,2)/C(4,2) for a
    assert pk["4"] == pytest.approx((0.0 + 1.0) / 2)
    assert s["pass^k_raw"]["overall"]["pass^k"]["1"] == pytest.approx((0.5 + 0.8) / 2)
    assert s["pass^k"]["by_gold_calls"] == {"1": {"trials": 4, "accuracy": 0.5}, "3": {"trials": 4, "accuracy": 1.0}}
    assert s["attribution"] == {"agent": 2, "user": 1} and s["reasons"] == {"state_mismatch": 3}


def test_argument_errors_say_what_is_wrong_with_a_right_tools_call():
    gold = {"order_id": "o-17", "qty": 2, "note": "gift"}
    assert argument_errors({"order_id": "o-17", "qty": 2.0, "note": "gift"}, gold) == []  # 2 == 2.0, as call_key
    assert argument_errors({"order_id": "", "qty": 2}, gold) == ["missing", "empty_value"]
    assert argument_errors({"order_id": "o-18", "qty": 2, "note": "gift", "rush": True}, gold) == ["wrong_value", "extra"]
    assert argument_errors({"order_id": "", "qty": 3, "note": "gift"}, gold) == ["empty_value", "wrong_value"]
    assert argument_errors({}, {"q": ""}) == ["missing"]  # gold's own empty string, left out
    assert argument_errors({"q": ""}, {"q": ""}) == []


def test_diagnose_counts_the_first_calls_argument_errors():
    """Hand-built trajectories (OpenAI-shaped calls, as the engine records them)."""
    sc = Scenario(id="a", domain="d1", read_only=True, intent="x", gold_hash="g", seed_hash="g",
                  gold_calls=[GoldCall(name="f", arguments={"k": "v"}), GoldCall(name="g", arguments={})])

    def traj(*calls: tuple[str, str]) -> Trajectory:
        msgs = [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}]} for i, (n, a) in enumerate(calls)]
        return Trajectory(id="t", run_id="r", scenario_id="a", domain="d1", trial=0, messages=msgs, end_reason="user_stop")

    right = diagnose(traj(("f", '{"k": "v"}'), ("g", "{}")), sc)
    assert right["right_first_call"] and right["argument_errors"] == []
    empty = diagnose(traj(("f", '{"k": ""}')), sc)
    assert empty["right_first_tool"] and not empty["right_first_call"] and empty["argument_errors"] == ["empty_value"]
    assert diagnose(traj(("g", '{"k": ""}')), sc)["argument_errors"] == []  # another tool: not an argument error
    bad = diagnose(traj(("f", '{"k": ')), sc)  # unparsed arguments: gold's left out, one extra
    assert bad["argument_errors"] == ["missing", "extra"]
    assert not empty["values_stated"]  # no user message said "v"
    told = traj(("f", '{"k": ""}'))
    told.messages.insert(0, {"role": "user", "content": "Look up V, please."})
    assert diagnose(told, sc)["values_stated"]  # the user had said it (case aside): copying it failed
    assert diagnostics([diagnose(told, sc), right])["first_call_arguments"] == {
        "missing": 0, "empty_value": 1, "wrong_value": 0, "extra": 0, "values_stated": 1}


def _tool(name: str, description: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {}}}


def test_text_match_tool_picks_by_the_users_words_alone():
    tools = [_tool("Crawler_scan", "Scans the specified host to retrieve information about its web directories "
                                   "and parameters used when a user requests specific details."),
             _tool("Attack", "Performs an automated penetration test against the specified host."),
             _tool("getFlightStatus", "Status of a flight.")]
    # a request that paraphrases a description (as the scenarios' users word them) names that tool
    assert text_match_tool("I want to perform an automated penetration test against my host", tools) == "Attack"
    assert text_match_tool("what is the status of flight HAT001?", tools) == "getFlightStatus"  # camelCase split
    assert text_match_tool("hello", tools) is None  # no shared word: no pick
    assert text_match_tool("scan it", []) is None
    assert text_match_tool("the status of a flight", ["getFlightStatus", {"function": None}, *tools]) == "getFlightStatus"


def test_diagnose_sets_the_text_matchers_pick_beside_the_agents():
    sc = Scenario(id="a", domain="d1", read_only=True, intent="x", gold_hash="g", seed_hash="g",
                  gold_calls=[GoldCall(name="Attack", arguments={})])
    tools = [_tool("Crawler_scan", "Scans a host for web directories."), _tool("Attack", "Runs a penetration test on a host.")]
    msgs = [{"role": "user", "content": "Please run a penetration test on example.com"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "Crawler_scan", "arguments": "{}"}}]}]
    t = Trajectory(id="t", run_id="r", scenario_id="a", domain="d1", trial=0, messages=msgs, tools=tools,
                   end_reason="user_stop")
    d = diagnose(t, sc)
    assert d["text_match_first_tool"] and not d["right_first_tool"]  # the words made it plain; the agent missed it
    other = t.model_copy(update={"messages": [{"role": "user", "content": "Please scan the web directories of example.com"},
                                              *msgs[1:]]})
    assert not diagnose(other, sc)["text_match_first_tool"]
    assert diagnostics([d, diagnose(other, sc)])["text_match_first_tool"] == 1


def test_values_stated_reads_the_users_words_before_the_call():
    gold = {"ids": ["rep_6", "rep_7"], "n": 3.0, "strict": True, "note": None}
    assert values_stated({"ids": [], "n": 3, "strict": True, "note": None}, gold, "repos rep_6 and REP_7")
    assert not values_stated({"ids": [], "n": 4, "strict": True}, gold, "repos rep_6 and rep_7")  # 3 never said
    assert values_stated({"ids": ["rep_6", "rep_7"], "n": 4}, gold, "three, no: 3")  # booleans and nulls need no words
    assert not values_stated({"strict": False}, {"strict": True}, "strict please")  # nothing a user would say


def test_evaluate_end_to_end_oracle_and_chatty(ws: Workspace):
    cfg = RolloutConfig(unsafe=UNSAFE, max_turns=4)
    with scripted(ws, "oracle") as url:
        good = evaluate(ws, url, model="oracle", k=2, split="all", cfg=cfg, concurrency=4)
    with scripted(ws, "chatty") as url:
        bad = evaluate(ws, url, model="chatty", k=2, split="all", cfg=cfg, concurrency=4)
    assert good["trajectories"] == bad["trajectories"] == 2 * good["scenarios"] > 0
    assert good["pass^k"]["overall"]["pass^k"]["2"] >= 0.75, good["reasons"]
    assert bad["passed"] == 0 and bad["attribution"].get("agent", 0) > 0
    saved = json.loads(eval_path(ws, good["run_id"]).read_text())
    assert saved["pass^k"] == good["pass^k"] and saved["model"] == "oracle" and saved["k"] == 2
    # the oracle's first calls are gold's: nothing wrong with their arguments; counted again from the
    # run's trajectories (as a curve does for a report written before the count existed), the same
    assert saved["diagnostics"]["right_first_call"] == good["trajectories"]
    assert saved["diagnostics"]["first_call_arguments"] == dict.fromkeys(
        ("missing", "empty_value", "wrong_value", "extra", "values_stated"), 0)
    assert run_diagnostics(ws, good["run_id"]) == saved["diagnostics"]
    assert run_diagnostics(ws, bad["run_id"])["tried_call"] == 0


def test_evaluate_tau2_scored_as_tau2_with_agreement(tmp_path):
    """tau2 retail's held-out tasks, the oracle agent (gold actions): tau2's DB check passes and
    tau2's own evaluator agrees; a miss can only be information the oracle never says."""
    from tasks.evaluation.tau2 import tau2_domain_dir

    ws = Workspace(tmp_path / "ws")
    tau2_domain_dir(ws, "retail")
    with scripted(ws, "oracle", "tau2_retail") as url:
        rep = evaluate(ws, url, model="oracle", k=1, split="heldout", max_scenarios=2, tau2=["retail"],
                       cfg=RolloutConfig(unsafe=UNSAFE, max_turns=3), concurrency=2, agreement_sample=1)
    assert rep["suite"] == "tau2" and rep["domains"] == ["tau2_retail"]
    assert rep["trajectories"] == rep["tau2_scored"] == 2
    assert set(rep["reasons"]) <= {"info_not_communicated"}, rep["reasons"]
    agr = rep["tau2_agreement"]
    assert agr["cases"] >= 3 and agr["agreement_rate"] == 1.0, agr


@pytest.mark.llm
def test_evaluate_with_local_smollm2(ws: Workspace, local_llm):
    rep = evaluate(ws, local_llm, k=1, split="all", max_scenarios=1,
                   cfg=RolloutConfig(unsafe=UNSAFE, max_turns=2, max_steps=2, max_tokens=128), concurrency=1)
    assert rep["trajectories"] == 1 and rep["verified"] == 1
    assert set(rep["pass^k"]["overall"]["pass^k"]) <= {"1"}


def test_evaluation_users_never_see_the_gold_state(ws: Workspace):
    """Training rollouts may let the scripted user stop at the gold state (a goal check); evaluation
    may not: its users judge from the conversation alone. The oracle agent (scripted endpoint) still
    passes, so the numbers are measured without that help, and the state is never hashed for it."""
    from tasks.rollouts.engine import run_rollouts

    cfg = RolloutConfig(unsafe=UNSAFE, max_turns=4)  # goal_check defaults to on: the caller cannot keep it
    with scripted(ws, "oracle") as url:
        rep = evaluate(ws, url, model="oracle-eval", k=1, split="all", cfg=cfg, concurrency=2)
        train = run_rollouts(ws, url, model="oracle-train", split="all", cfg=cfg, run_id="with-goal-check",
                             use_cache=False)
    assert rep["user_goal_check"] is False and rep["passed"] == rep["trajectories"] > 0
    run_cfg = json.loads((ws.rollout_dir(rep["run_id"]) / "run.json").read_text())["config"]
    assert run_cfg["goal_check"] is False
    evaluated = [Trajectory.model_validate_json(x) for x in
                 (ws.rollout_dir(rep["run_id"]) / "trajectories.jsonl").read_text().splitlines()]
    trained = [Trajectory.model_validate_json(x) for x in
               (ws.rollout_dir(train["run_id"]) / "trajectories.jsonl").read_text().splitlines()]
    assert all("goal_check_s" not in t.timings for t in evaluated)
    assert any("goal_check_s" in t.timings for t in trained)  # write scenarios: the state was compared to gold
    assert all(t.end_reason == "user_stop" for t in evaluated)


def test_scripted_user_without_goal_check_judges_the_conversation():
    import asyncio

    from tasks.rollouts.users import STOP, ScriptedUser

    s = Scenario(id="s", domain="d", read_only=False, intent="Cancel order o1.", gold_hash="g", seed_hash="s",
                 gold_calls=[GoldCall(name="cancel_order", arguments={"order_id": "o1"})])
    tool = [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "cancel_order", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "{}"}]
    asks = tool + [{"role": "assistant", "content": "Is there anything else?"}]
    says = tool + [{"role": "assistant", "content": "Order o1 is cancelled."}]
    announces = tool + [{"role": "assistant", "content": "I'll cancel it now."}]

    def reply(user: ScriptedUser, messages: list, reached: bool) -> str:
        return asyncio.run(user.respond(messages, goal_reached=reached)).text

    blind = ScriptedUser(s, goal_check=False)
    assert STOP not in reply(blind, asks, True)  # the gold state reached tells it nothing
    assert STOP not in reply(blind, announces, False)
    assert STOP in reply(blind, says, False)
    sighted = ScriptedUser(s, goal_check=True)
    assert STOP in reply(sighted, asks, True) and STOP not in reply(sighted, says, False)


def test_cli_evaluate_stops_settled_failures(ws: Workspace) -> None:
    """`agentscaler evaluate --stop-when-failed --json` against the scripted looping agent (our own
    plumbing): every trial ends at its third identical call and fails, attributed to the agent."""
    from typer.testing import CliRunner

    from flows.cli import app

    with scripted(ws, "looper") as url:
        res = CliRunner().invoke(app, ["-w", str(ws.root), "evaluate", "--llm", url, "--model", "looper", "--k", "1",
                                       "--split", "all", "--max-scenarios", "2", "--stop-when-failed", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["trajectories"] == 2 and rep["passed"] == 0 and rep["rollout"]["end_reasons"] == {"settled_failure": 2}
    assert rep["reasons"]["repetition"] == 2 and rep["attribution"]["agent"] == 2
    # the agent's repetition penalty is part of the run (its id): the server's default is another run
    with scripted(ws, "looper") as url:
        server = CliRunner().invoke(app, ["-w", str(ws.root), "evaluate", "--llm", url, "--model", "looper", "--k", "1",
                                          "--split", "all", "--max-scenarios", "2", "--stop-when-failed",
                                          "--repeat-penalty", "server", "--json"])
    assert server.exit_code == 0, server.output
    assert json.loads(server.stdout)["run_id"] != rep["run_id"]
    bad = CliRunner().invoke(app, ["-w", str(ws.root), "evaluate", "--llm", "http://127.0.0.1:9/v1", "--repeat-penalty", "some"])
    assert bad.exit_code == 2 and "--repeat-penalty is a number or 'server'" in bad.output
