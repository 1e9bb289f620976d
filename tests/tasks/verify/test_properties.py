"""Properties of verification by replay (hypothesis, real sandbox, shop fixture):

- a gold replay (tasks.rollouts.gold: the gold calls run for real) always passes;
- any single edit to one of its tool outputs is rejected (output_mismatch);
- any single edit to its calls (tool name, an argument, dropping, repeating or swapping calls, the
  recorded outputs left as they were) is rejected, unless the edited dialogue is still a true
  record that reaches the gold outcome: that is decided apart from the verifier, by running the
  edited calls one by one in a fresh episode (Environment.call, as a rollout does), and then the
  verifier must pass it. Hypothesis reports how many edits fell on each side.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentscaler.artifacts import load_scenarios
from agentscaler.models import Scenario, Trajectory
from agentscaler.workspace import Workspace
from envs.episode import Environment
from tasks.rollouts.gold import gold_trajectory
from tasks.scenarios.build import build_scenarios
from tasks.verify.replay import Replayer
from tasks.verify.verify import calls_match, verify_trajectories
from tests.conftest import load_shop_builder

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    ws = Workspace(tmp_path_factory.mktemp("props"))
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=16, seed=3)
    scenarios = load_scenarios(ws, "shop")
    with Environment.open(ws.domain_dir("shop")) as env, Replayer(ws.root / "domains") as rp:
        golds = {s.id: gold_trajectory(s, env, env.tools(), "You are an agent.", "p") for s in scenarios}
        yield ws, env, rp, scenarios, golds


def _verdict(ws: Workspace, rp: Replayer, t: Trajectory):
    verify_trajectories(ws, [t], replayer=rp)
    return t.verdict


def _pairs(t: Trajectory) -> list[int]:
    """Indices of the assistant messages that hold a call (each followed by its tool message)."""
    return [i for i, m in enumerate(t.messages) if m["role"] == "assistant" and m.get("tool_calls")]


def _true_record(env: Environment, s: Scenario, t: Trajectory) -> bool:
    """Apart from the verifier: run the dialogue's calls one by one in a fresh episode; is every tool
    message what its call returns, the final state gold, and (read-only) are the calls the gold ones?"""
    env.reset()
    ok_calls = []
    for i in _pairs(t):
        fn = t.messages[i]["tool_calls"][0]["function"]
        args = json.loads(fn["arguments"])
        res = env.call(fn["name"], args)
        if t.messages[i + 1]["content"] != res.text():
            return False
        if res.ok:
            ok_calls.append((fn["name"], args))
    if env.state_hash() != s.gold_hash:
        return False
    kinds = {x.name: x.kind for x in env.spec.tools}
    return not s.read_only or calls_match(ok_calls, [(c.name, c.arguments) for c in s.gold_calls], kinds)


def test_gold_replays_pass(world) -> None:
    ws, _, rp, scenarios, golds = world
    trajs = [copy.deepcopy(golds[s.id]) for s in scenarios]
    assert verify_trajectories(ws, trajs, replayer=rp)["passed"] == len(trajs)


@SETTINGS
@given(data=st.data())
def test_any_edit_of_an_output_is_rejected(world, data: st.DataObject) -> None:
    ws, _, rp, scenarios, golds = world
    s = data.draw(st.sampled_from(scenarios))
    t = copy.deepcopy(golds[s.id])
    tools = [m for m in t.messages if m["role"] == "tool"]
    m = data.draw(st.sampled_from(tools))
    old = m["content"]
    how = data.draw(st.sampled_from(["append", "replace", "error", "other_output", "json_value"]))
    if how == "append":
        new = old + data.draw(st.text(min_size=1, max_size=5))
    elif how == "replace":
        new = data.draw(st.text(max_size=40))
    elif how == "error":
        new = "Error: " + data.draw(st.text(max_size=20))
    elif how == "other_output":
        new = data.draw(st.sampled_from([x["content"] for g in golds.values() for x in g.messages if x["role"] == "tool"]))
    else:  # change one value inside the JSON result
        value = json.loads(old)
        if isinstance(value, list):
            value = value[:-1] if value else [{}]
        elif isinstance(value, dict) and value:
            key = data.draw(st.sampled_from(sorted(value)))
            value[key] = data.draw(st.one_of(st.integers(), st.text(max_size=8), st.none()))
        new = json.dumps(value, ensure_ascii=False)
    if new == old:
        return  # not an edit
    event(how)
    m["content"] = new
    v = _verdict(ws, rp, t)
    assert not v.passed and "output_mismatch" in v.reasons, (how, old, new, v)


@SETTINGS
@given(data=st.data())
def test_any_edit_of_the_calls_is_rejected_unless_it_is_still_a_true_gold_record(world, data: st.DataObject) -> None:
    ws, env, rp, scenarios, golds = world
    s = data.draw(st.sampled_from(scenarios))
    t = copy.deepcopy(golds[s.id])
    pairs = _pairs(t)
    i = data.draw(st.sampled_from(pairs))
    fn = t.messages[i]["tool_calls"][0]["function"]
    args: dict[str, Any] = json.loads(fn["arguments"])
    names = [x.name for x in env.spec.tools]
    how = data.draw(st.sampled_from(["unknown_tool", "other_tool", "argument", "drop_argument", "extra_argument",
                                     "drop_call", "repeat_call", "swap_calls"]))
    if how == "unknown_tool":
        fn["name"] = data.draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
            lambda n: n not in names))
    elif how == "other_tool":
        fn["name"] = data.draw(st.sampled_from([n for n in names if n != fn["name"]]))
    elif how == "argument" and args:
        key = data.draw(st.sampled_from(sorted(args)))
        args[key] = data.draw(st.one_of(st.text(max_size=8), st.integers(-3, 10), st.sampled_from(
            ["u1", "u2", "u3", "p1", "p3", "o1", "o4", "Mug", "Desk"])))
        fn["arguments"] = json.dumps(args)
    elif how == "drop_argument" and args:
        args.pop(data.draw(st.sampled_from(sorted(args))))
        fn["arguments"] = json.dumps(args)
    elif how == "extra_argument":
        args[data.draw(st.sampled_from(["note", "quantity", "max_price"]))] = data.draw(st.integers(1, 3))
        fn["arguments"] = json.dumps(args)
    elif how == "drop_call":
        del t.messages[i:i + 2]
    elif how == "repeat_call":
        t.messages[i + 2:i + 2] = copy.deepcopy(t.messages[i:i + 2])
    elif how == "swap_calls" and len(pairs) > 1:
        j = pairs[pairs.index(i) - 1] if i != pairs[0] else pairs[1]
        a, b = sorted((i, j))
        t.messages[a:a + 2], t.messages[b:b + 2] = t.messages[b:b + 2], t.messages[a:a + 2]
    else:
        return  # this edit does not apply to this call
    if t.messages == golds[s.id].messages:
        return  # not an edit
    v = _verdict(ws, rp, t)
    if how == "unknown_tool":
        assert v.reasons[:1] == ["unknown_tool"] or "malformed_dialogue" in v.reasons, v
    true_record = how != "unknown_tool" and _true_record(env, s, t)
    event(f"{how}: {'still a true gold record' if true_record else 'rejected'}")
    assert v.passed == true_record, (how, [m for m in t.messages if m["role"] != "system"], v)
