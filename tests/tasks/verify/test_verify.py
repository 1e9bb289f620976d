"""The verifier's own logic, one case per reason code.

The trajectories here are scripted by hand (no LLM): built from the shop fixture's real
scenarios (generated and gold-executed in the real sandbox), then broken one way at a time.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agentscaler.artifacts import TRAJECTORIES, load_scenarios
from agentscaler.models import Scenario, Trajectory
from agentscaler.workspace import Workspace
from envs.spec import DomainSpec
from tasks.rollouts.conversation import trajectory_id
from tasks.scenarios.build import build_scenarios
from tasks.verify.verify import DomainTools, calls_match, verify_run, verify_trajectory
from tests.conftest import load_shop_builder


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("verify"))
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=12, seed=1)
    return ws


@pytest.fixture(scope="module")
def tools(ws: Workspace) -> DomainTools:
    return DomainTools(DomainSpec.load(ws.domain_dir("shop")))


def _pick(ws: Workspace, read_only: bool, min_calls: int = 1, facts: bool = False) -> Scenario:
    for s in load_scenarios(ws, "shop"):
        if s.read_only == read_only and len(s.gold_calls) >= min_calls and (not facts or s.user_facts):
            return s
    raise AssertionError("fixture has no such scenario")


def perfect(s: Scenario) -> Trajectory:
    """A scripted trajectory that does exactly the gold calls, then reports the result."""
    msgs: list[dict] = [{"role": "system", "content": "agent"}, {"role": "user", "content": s.intent}]
    for i, c in enumerate(s.gold_calls):
        msgs.append({"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
            "name": c.name, "arguments": json.dumps(c.arguments)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": c.name, "content": json.dumps(c.output)})
    msgs.append({"role": "assistant", "content": "Done: " + json.dumps(s.gold_calls[-1].output)})
    msgs.append({"role": "user", "content": "Thanks ###STOP###"})
    return Trajectory(id=trajectory_id("t", s.id, 0), run_id="t", scenario_id=s.id, domain=s.domain, messages=msgs,
                      final_hash=s.gold_hash, final_diff=copy.deepcopy(s.gold_diff), end_reason="user_stop")


def _call(i: int, name: str, args: object) -> dict:
    return {"role": "assistant", "tool_calls": [{"id": f"x{i}", "type": "function", "function": {
        "name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}]}


def test_perfect_trajectories_pass(ws: Workspace, tools: DomainTools) -> None:
    for s in load_scenarios(ws, "shop"):
        v = verify_trajectory(perfect(s), s, tools)
        assert v.passed, (s.intent, v)
        assert v.attribution == "none"


def test_malformed_dialogue(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=True)
    cases = []
    t = perfect(s)  # a tool result without its call
    t.messages.insert(2, {"role": "tool", "tool_call_id": "nope", "name": "get_user", "content": "{}"})
    cases.append(t)
    t = perfect(s)  # arguments that are not JSON
    t.messages.insert(2, _call(9, "get_user", "{user_id: u1"))
    t.messages.insert(3, {"role": "tool", "tool_call_id": "x9", "name": "get_user", "content": "Error: bad"})
    cases.append(t)
    t = perfect(s)  # a call whose result never came
    t.messages.insert(-2, _call(8, "get_user", {"user_id": "u1"}))
    cases.append(t)
    t = perfect(s)  # a malformed model reply recorded by the engine
    t.tokens["n_format_errors"] = 1
    t.messages.insert(-2, {"role": "assistant", "content": "<tool_call>{bad</tool_call>"})
    cases.append(t)
    t = perfect(s)  # conversation does not start with the user
    t.messages.insert(1, {"role": "assistant", "content": "hello"})
    cases.append(t)
    for t in cases:
        v = verify_trajectory(t, s, tools)
        assert not v.passed and "malformed_dialogue" in v.reasons, v


def test_empty_user_turn_is_the_users_fault(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=True)
    t = perfect(s)
    t.messages[1]["content"] = "  "
    v = verify_trajectory(t, s, tools)
    assert v.reasons == ["malformed_dialogue"] and v.attribution == "user"


def test_unknown_tool_and_invalid_arguments(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=False)
    t = perfect(s)
    t.messages[2:2] = [_call(1, "drop_tables", {}), {"role": "tool", "tool_call_id": "x1", "content": "Error: unknown"}]
    v = verify_trajectory(t, s, tools)
    assert v.reasons == ["unknown_tool"] and v.attribution == "agent"
    t = perfect(s)
    t.messages[2:2] = [_call(1, "get_user", {"user_id": 5}), {"role": "tool", "tool_call_id": "x1", "content": "Error: x"}]
    assert verify_trajectory(t, s, tools).reasons == ["invalid_arguments"]


def test_malformed_tool_schema_makes_its_calls_invalid_never_an_exception(ws: Workspace) -> None:
    """agentscaler.schemas: a schema that validates nothing rejects every call (it used to raise out of here)."""
    spec = DomainSpec.load(ws.domain_dir("shop"))
    broken = spec.model_copy(update={"tools": [t.model_copy(update={"parameters": {"type": "object", "properties": {
        "user_id": {"type": "foo"}}}}) if t.name == "get_user" else t for t in spec.tools]})
    s = _pick(ws, read_only=False)
    t = perfect(s)
    t.messages[2:2] = [_call(1, "get_user", {"user_id": "u1"}), {"role": "tool", "tool_call_id": "x1", "content": "Error: x"}]
    assert verify_trajectory(t, s, DomainTools(broken)).reasons == ["invalid_arguments"]


def test_repetition(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=False)
    t = perfect(s)
    for i in range(3):
        t.messages[2:2] = [_call(i, "get_user", {"user_id": "u1"}),
                           {"role": "tool", "tool_call_id": f"x{i}", "content": "{}"}]
    assert verify_trajectory(t, s, tools).reasons == ["repetition"]
    t = perfect(s)
    for _ in range(3):
        t.messages[-2:-2] = [{"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "ok"}]
    assert "repetition" in verify_trajectory(t, s, tools).reasons


def test_no_tool_calls_turn_limit_fatal(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=False, facts=True)
    t = Trajectory(id="x", run_id="t", scenario_id=s.id, domain="shop", end_reason="user_stop",
                   messages=[{"role": "user", "content": s.intent}, {"role": "assistant", "content": "No."},
                             {"role": "user", "content": "###STOP###"}], final_hash=s.seed_hash)
    v = verify_trajectory(t, s, tools)
    assert v.reasons == ["no_tool_calls", "state_mismatch"] and v.attribution == "agent"
    t = perfect(s)
    t.end_reason = "turn_limit"
    assert verify_trajectory(t, s, tools).reasons == ["turn_limit"]
    t = perfect(s)
    t.end_reason, t.error = "fatal_error", "environment: SandboxError: worker died"
    v = verify_trajectory(t, s, tools)
    assert v.reasons == ["fatal_error"] and v.attribution == "environment"
    # an agent prompt over the model's context is the agent's failure (scored); the user simulator's LLM
    # failing is the user's; other LLM failures (server down) are the environment's
    overflow = ("llm: LLMHTTPError: HTTP 400: This model's maximum context length is 4096 tokens "
                "(context_length_exceeded)")
    for error, who in ((overflow + " (agent turn)", "agent"), (overflow + " (user turn)", "user"),
                       ("llm: LLMTransportError: connection refused (agent turn)", "environment")):
        t.error = error
        assert verify_trajectory(t, s, tools).attribution == who, error


def test_state_mismatch_shows_field_diff(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=False)
    t = perfect(s)
    t.final_hash, t.final_diff = s.seed_hash, []
    v = verify_trajectory(t, s, tools)
    assert v.reasons == ["state_mismatch"]
    assert len(v.diff) == len(s.gold_diff)
    for d in v.diff:
        g = next(g for g in s.gold_diff if (g["table"], g["key"], g["column"]) == (d["table"], d["key"], d["column"]))
        assert d["expected"] == g["after"] and d["actual"] == g["before"]


def test_read_only_calls_exact_but_reads_commute(ws: Workspace, tools: DomainTools) -> None:
    s = _pick(ws, read_only=True, min_calls=2)
    t = perfect(s)  # reads in another order: still a match
    pairs = [t.messages[i:i + 2] for i in range(2, 2 + 2 * len(s.gold_calls), 2)]
    t.messages[2:2 + 2 * len(pairs)] = [m for p in reversed(pairs) for m in p]
    assert verify_trajectory(t, s, tools).passed
    t = perfect(s)  # an extra failing call is allowed
    t.messages[2:2] = [_call(7, "get_order", {"order_id": "zz"}), {"role": "tool", "tool_call_id": "x7",
                                                                   "content": "Error: order zz not found"}]
    assert verify_trajectory(t, s, tools).passed
    t = perfect(s)  # an extra successful read is a mismatch
    t.messages[2:2] = [_call(7, "find_products", {"query": "mug"}), {"role": "tool", "tool_call_id": "x7",
                                                                     "content": "[]"}]
    assert verify_trajectory(t, s, tools).reasons == ["call_mismatch"]


def test_calls_match_orders_writes() -> None:
    kinds = {"r": "read", "w": "write"}
    a = [("r", {"x": 1}), ("w", {"y": 2}), ("w", {"y": 3})]
    assert calls_match([("r", {"x": 1.0}), ("w", {"y": 2}), ("w", {"y": 3})], a, kinds)
    assert not calls_match([("w", {"y": 2}), ("r", {"x": 1}), ("w", {"y": 3})], a, kinds)
    assert not calls_match([("r", {"x": 1}), ("w", {"y": 3}), ("w", {"y": 2})], a, kinds)


def test_user_never_gave_a_needed_fact(ws: Workspace, tools: DomainTools) -> None:
    s = next(s for s in load_scenarios(ws, "shop") if not s.read_only and s.user_facts and any(
        str(v) in [str(a) for c in s.gold_calls for a in c.arguments.values()] for v in s.user_facts.values()))
    t = Trajectory(id="x", run_id="t", scenario_id=s.id, domain="shop", end_reason="user_stop",
                   messages=[{"role": "user", "content": "I want to change something."},
                             {"role": "assistant", "content": "Which account?"},
                             {"role": "user", "content": "I don't know. ###STOP###"}], final_hash=s.seed_hash)
    assert verify_trajectory(t, s, tools).attribution == "user"
    t.messages[0]["content"] = s.intent  # now the facts were given: the agent is to blame
    assert verify_trajectory(t, s, tools).attribution == "agent"


def test_verify_run_writes_files_and_embeds_verdicts(ws: Workspace) -> None:
    scen = load_scenarios(ws, "shop")
    good = [perfect(s).model_copy(update={"run_id": "vr", "id": trajectory_id("vr", s.id, 0),
                                          "agent_model": "gold-replay" if i == 0 else "m"})
            for i, s in enumerate(scen)]
    bad = perfect(scen[0]).model_copy(update={"run_id": "vr", "id": trajectory_id("vr", scen[0].id, 1), "trial": 1,
                                              "end_reason": "turn_limit"})
    run = ws.rollout_dir("vr")
    run.mkdir(parents=True)
    lines = [t.model_dump_json() for t in good + [bad]] + ['{"id": "torn']
    (run / TRAJECTORIES).write_text("\n".join(lines) + "\n")
    rep = verify_run(ws, "vr")
    assert rep["trajectories"] == len(scen) + 1 and rep["passed"] == len(scen) and rep["unreadable"] == 1
    assert rep["reasons"]["turn_limit"] == 1 and rep["funnel"]["completed"] == len(scen)
    assert rep["by_origin"] == {"agent": {"trajectories": len(scen), "passed": len(scen) - 1},
                                "gold-replay": {"trajectories": 1, "passed": 1}}
    assert rep["pass^k"]["overall"]["pass^k"]["1"] == pytest.approx((len(scen) - 0.5) / len(scen), abs=1e-6)
    verified = [json.loads(x) for x in (run / "verified.jsonl").read_text().splitlines()]
    assert len(verified) == len(scen) + 1 and sum(r["verdict"]["passed"] for r in verified) == len(scen)
    embedded = [Trajectory.model_validate_json(x) for x in (run / TRAJECTORIES).read_text().splitlines()]
    assert all(t.verdict is not None for t in embedded) and len(embedded) == len(scen) + 1
    assert json.loads(Path(run / "verify.json").read_text())["run_id"] == "vr"
