"""The verifier: one case per reason code, crafted bad trajectories, honest ones that pass.

The trajectories are scripted by hand (no LLM) on the shop fixture's real scenarios (generated and
gold-executed in the real sandbox). Honest ones are recorded for real: their calls run in a fresh
episode of the real sandboxed environment and the tool messages hold what it returned, as the
rollout engine records them. Then they are broken one way at a time; the verifier replays every
call itself in the real sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentscaler.artifacts import TRAJECTORIES, load_scenarios
from agentscaler.models import Scenario, Trajectory
from agentscaler.workspace import Workspace
from envs.episode import Checked, Environment
from envs.spec import DomainSpec
from tasks.rollouts.conversation import trajectory_id
from tasks.rollouts.gold import gold_trajectory
from tasks.scenarios.build import build_scenarios
from tasks.verify.replay import Replayer
from tasks.verify.verify import DomainTools, call_key, calls_match, check_dialogue, verify_run, verify_trajectories
from tests.conftest import load_shop_builder


@pytest.fixture(scope="module")
def env(ws: Workspace):
    with Environment.open(ws.domain_dir("shop")) as e:
        yield e


@pytest.fixture(scope="module")
def rp(ws: Workspace):
    with Replayer(ws.root / "domains") as r:
        yield r


@pytest.fixture(scope="module")
def tools(ws: Workspace) -> DomainTools:
    return DomainTools(DomainSpec.load(ws.domain_dir("shop")))


def _pick(ws: Workspace, read_only: bool, min_calls: int = 1, facts: bool = False, writes: int = 0) -> Scenario:
    for s in load_scenarios(ws, "shop"):
        n_writes = sum(c.name in ("place_order", "cancel_order", "update_email") for c in s.gold_calls)
        if s.read_only == read_only and len(s.gold_calls) >= min_calls and (not facts or s.user_facts) \
                and n_writes >= writes:
            return s
    raise AssertionError("fixture has no such scenario")


def gold(env: Environment, s: Scenario) -> Trajectory:
    """The honest gold replay (tasks.rollouts.gold: the gold calls run for real)."""
    return gold_trajectory(s, env, env.tools(), "You are an agent.", "t")


def record(env: Environment, s: Scenario, calls: list[tuple[str, Any]], trial: int = 0) -> Trajectory:
    """An honest trajectory making `calls`: each runs in a fresh episode and its tool message holds
    what it returned, as the rollout engine records it."""
    env.reset()
    msgs: list[dict] = [{"role": "system", "content": "agent"}, {"role": "user", "content": s.intent}]
    for i, (name, args) in enumerate(calls):
        msgs.append(_call(i, name, args))
        msgs.append({"role": "tool", "tool_call_id": f"x{i}", "name": name, "content": env.call(name, args).text()})
    msgs += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks ###STOP###"}]
    return Trajectory(id=trajectory_id("t", s.id, trial), run_id="t", scenario_id=s.id, domain=s.domain, trial=trial,
                      messages=msgs, final_hash=env.state_hash(), final_diff=env.diff(), end_reason="user_stop")


def _call(i: int, name: str, args: object) -> dict:
    return {"role": "assistant", "tool_calls": [{"id": f"x{i}", "type": "function", "function": {
        "name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}]}


def verdict(ws: Workspace, rp: Replayer, t: Trajectory):
    verify_trajectories(ws, [t], replayer=rp)
    return t.verdict


def tool_messages(t: Trajectory) -> list[dict]:
    return [m for m in t.messages if m["role"] == "tool"]


# honest trajectories pass -------------------------------------------------------------------------

def test_gold_replays_pass(ws: Workspace, env: Environment, rp: Replayer) -> None:
    trajs = [gold(env, s) for s in load_scenarios(ws, "shop")]
    rep = verify_trajectories(ws, trajs, replayer=rp)
    assert rep["passed"] == len(trajs), [(t.scenario_id, t.verdict) for t in trajs if not t.verdict.passed]
    assert rep["replay"]["trajectories"] == len(trajs) and rep["replay"]["replayed_fresh"] == 0
    assert all(t.verdict.attribution == "none" for t in trajs)


def test_honest_detours_pass(ws: Workspace, env: Environment, rp: Replayer) -> None:
    """An extra failing call, an extra read in a write scenario, reads in another order."""
    s = _pick(ws, read_only=False, writes=2)
    calls = [(c.name, c.arguments) for c in s.gold_calls]
    t = record(env, s, [("get_order", {"order_id": "zz"}), ("get_user", {"user_id": "u3"})] + calls)
    assert verdict(ws, rp, t).passed
    r = _pick(ws, read_only=True, min_calls=2)
    t = record(env, r, [(c.name, c.arguments) for c in reversed(r.gold_calls)])
    assert verdict(ws, rp, t).passed
    t = record(env, r, [("get_order", {"order_id": "zz"})] + [(c.name, c.arguments) for c in r.gold_calls])
    assert verdict(ws, rp, t).passed  # a failed call is allowed in a read-only scenario


# what the issue found accepted -------------------------------------------------------------------

def test_missing_write_with_the_gold_hash_recorded(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    t = record(env, s, [(c.name, c.arguments) for c in s.gold_calls if c.name not in ("place_order", "cancel_order",
                                                                                     "update_email")])
    t.final_hash, t.final_diff = s.gold_hash, list(s.gold_diff)  # the forged record of the gold state
    v = verdict(ws, rp, t)
    assert not v.passed and {"state_mismatch", "recorded_state_mismatch"} <= set(v.reasons)
    assert "output_mismatch" not in v.reasons  # the reads it shows are what the tools return
    assert len(v.diff) == len(s.gold_diff)  # the replayed state is the seed: every gold change is missing
    for d in v.diff:
        g = next(g for g in s.gold_diff if (g["table"], g["key"], g["column"]) == (d["table"], d["key"], d["column"]))
        assert d["expected"] == g["after"] and d["actual"] == g["before"]


def test_forged_outputs_on_a_read_only_scenario(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=True)
    t = gold(env, s)
    tool_messages(t)[0]["content"] = json.dumps({"user_id": "u1", "name": "Someone Else", "balance": 1e6})
    v = verdict(ws, rp, t)
    assert v.reasons == ["output_mismatch"] and v.attribution == "agent"


# one crafted trajectory per reason code ----------------------------------------------------------

def test_forged_hash(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    t = gold(env, s)
    t.final_hash = "0" * 32
    assert verdict(ws, rp, t).reasons == ["recorded_state_mismatch"]
    t.final_hash = ""  # no recorded state (an import, a run that could not hash): nothing to compare
    assert verdict(ws, rp, t).passed


def test_forged_output_of_a_write(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    t = gold(env, s)
    m = tool_messages(t)[-1]
    m["content"] = m["content"].replace("cancelled", "refunded") if "cancelled" in m["content"] else m["content"] + " "
    assert verdict(ws, rp, t).reasons == ["output_mismatch"]


def test_extra_write(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    t = record(env, s, [(c.name, c.arguments) for c in s.gold_calls] + [("update_email", {"user_id": "u1", "email":
                                                                                          "x@evil.example"})])
    v = verdict(ws, rp, t)
    assert v.reasons == ["state_mismatch"]  # honest record, wrong outcome
    assert any(d["table"] == "users" and d["column"] == "email" and d["actual"] == "x@evil.example" for d in v.diff)
    t.final_hash = s.gold_hash  # ... and the record forged to look right
    assert verdict(ws, rp, t).reasons == ["recorded_state_mismatch", "state_mismatch"]


def test_reordered_writes(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False, writes=2)
    t = gold(env, s)
    assert verdict(ws, rp, t).passed
    w = [i for i, m in enumerate(t.messages) if m["role"] == "assistant" and m.get("tool_calls")
         and m["tool_calls"][0]["function"]["name"] in ("place_order", "cancel_order")]
    a, b = w[0], w[-1]
    msgs = t.messages
    msgs[a:a + 2], msgs[b:b + 2] = msgs[b:b + 2], msgs[a:a + 2]  # each write keeps its recorded result
    v = verdict(ws, rp, t)
    assert not v.passed and {"output_mismatch", "recorded_state_mismatch", "state_mismatch"} <= set(v.reasons)


def test_failed_call_shown_as_success_and_back(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    t = record(env, s, [("get_order", {"order_id": "o999"})] + [(c.name, c.arguments) for c in s.gold_calls])
    assert tool_messages(t)[0]["content"].startswith("Error:") and verdict(ws, rp, t).passed
    tool_messages(t)[0]["content"] = json.dumps({"order_id": "o999", "status": "placed"})
    assert verdict(ws, rp, t).reasons == ["output_mismatch"]
    t = gold(env, s)  # a call that succeeds, shown as failed
    tool_messages(t)[0]["content"] = "Error: service unavailable"
    assert verdict(ws, rp, t).reasons == ["output_mismatch"]


def test_read_only_call_mismatch_uses_the_replayed_outcome(ws: Workspace, env: Environment, rp: Replayer) -> None:
    """An extra read that succeeds is a mismatch, though its record says it failed (the replay decides)."""
    s = _pick(ws, read_only=True, min_calls=2)
    t = record(env, s, [("find_products", {"query": "mug"})] + [(c.name, c.arguments) for c in s.gold_calls])
    assert verdict(ws, rp, t).reasons == ["call_mismatch"]
    tool_messages(t)[0]["content"] = "Error: no such product"
    assert verdict(ws, rp, t).reasons == ["output_mismatch", "call_mismatch"]


def test_unknown_tool_and_invalid_arguments(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    gold_calls = [(c.name, c.arguments) for c in s.gold_calls]
    t = record(env, s, [("drop_tables", {})] + gold_calls)
    assert tool_messages(t)[0]["content"].startswith("Error: unknown tool")
    v = verdict(ws, rp, t)
    assert v.reasons == ["unknown_tool"] and v.attribution == "agent"
    t = record(env, s, [("get_user", {"user_id": 5})] + gold_calls)
    assert verdict(ws, rp, t).reasons == ["invalid_arguments"]


def test_malformed_tool_schema_makes_its_calls_invalid_never_an_exception(ws: Workspace, env: Environment) -> None:
    """agentscaler.schemas: a schema that validates nothing rejects every call (it used to raise out of here)."""
    spec = DomainSpec.load(ws.domain_dir("shop"))
    broken = spec.model_copy(update={"tools": [t.model_copy(update={"parameters": {"type": "object", "properties": {
        "user_id": {"type": "foo"}}}}) if t.name == "get_user" else t for t in spec.tools]})
    s = _pick(ws, read_only=False)
    t = record(env, s, [("get_user", {"user_id": "u1"})] + [(c.name, c.arguments) for c in s.gold_calls])
    assert check_dialogue(t, s, DomainTools(broken)).reasons == {"invalid_arguments"}


def test_non_finite_arguments_are_invalid_on_a_flat_schema(ws: Workspace, env: Environment, rp: Replayer) -> None:
    """The static check runs value_problem first, as the episode does: the flat check alone passed a
    NaN for a number (and the valid calls go to the replay unchecked, so it must not)."""
    spec = DomainSpec.load(ws.domain_dir("shop"))
    flat = spec.model_copy(update={"tools": [t.model_copy(update={"parameters": {"type": "object", "properties": {
        "user_id": {"type": "number"}}}}) if t.name == "get_user" else t for t in spec.tools]})
    s = _pick(ws, read_only=False)
    t = record(env, s, [("get_user", {"user_id": 1.5})] + [(c.name, c.arguments) for c in s.gold_calls])
    assert "invalid_arguments" not in check_dialogue(t, s, DomainTools(flat)).reasons
    call = next(m for m in t.messages if m.get("tool_calls"))["tool_calls"][0]["function"]
    for bad in ('{"user_id": NaN}', '{"user_id": Infinity}'):
        call["arguments"] = bad
        d = check_dialogue(t, s, DomainTools(flat))
        assert "invalid_arguments" in d.reasons and not isinstance(d.calls[0], Checked)
    assert call_key("a", {"x": float("nan")}) != call_key("a", {"x": None})
    assert call_key("a", {"x": 1.0, "y": [2.0]}) == call_key("a", {"y": [2], "x": 1})


def test_checked_calls_replay_as_plain_ones(env: Environment) -> None:
    """envs.episode.Checked skips the argument check only for a tool of the domain."""
    plain = [("get_user", {"user_id": "u1"}), ("nope", {})]
    checked = [Checked(c) for c in plain]
    (a, _), (b, _) = env.replay([plain, checked])
    assert [r.text() for r in a] == [r.text() for r in b] and b[1].text().startswith("Error: unknown tool")


def test_repetition(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False)
    t = record(env, s, [("get_user", {"user_id": "u1"})] * 3 + [(c.name, c.arguments) for c in s.gold_calls])
    assert verdict(ws, rp, t).reasons == ["repetition"]
    t = gold(env, s)
    for _ in range(3):
        t.messages[-2:-2] = [{"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "ok"}]
    assert "repetition" in verdict(ws, rp, t).reasons


def test_malformed_dialogue(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=True)
    cases = []
    t = gold(env, s)  # a tool result without its call
    t.messages.insert(2, {"role": "tool", "tool_call_id": "nope", "name": "get_user", "content": "{}"})
    cases.append(t)
    t = gold(env, s)  # arguments that are not JSON (replayed as given: the environment's error)
    t.messages.insert(2, _call(9, "get_user", "{user_id: u1"))
    t.messages.insert(3, {"role": "tool", "tool_call_id": "x9", "name": "get_user", "content": "Error: bad"})
    cases.append(t)
    t = gold(env, s)  # a call whose result never came
    t.messages.insert(-2, _call(8, "get_user", {"user_id": "u1"}))
    cases.append(t)
    t = gold(env, s)  # a malformed model reply recorded by the engine
    t.tokens["n_format_errors"] = 1
    t.messages.insert(-2, {"role": "assistant", "content": "<tool_call>{bad</tool_call>"})
    cases.append(t)
    t = gold(env, s)  # conversation does not start with the user
    t.messages.insert(1, {"role": "assistant", "content": "hello"})
    cases.append(t)
    t = gold(env, s)  # two calls of one turn share an id
    t.messages[2]["tool_calls"].append(dict(t.messages[2]["tool_calls"][0]))
    cases.append(t)
    t = gold(env, s)  # a message that is no chat message
    t.messages.insert(2, {"role": "function", "name": "get_user", "content": "{}"})
    cases.append(t)
    for t in cases:
        v = verdict(ws, rp, t)
        assert not v.passed and "malformed_dialogue" in v.reasons, v


def test_empty_user_turn_is_the_users_fault(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=True)
    t = gold(env, s)
    t.messages[1]["content"] = "  "
    v = verdict(ws, rp, t)
    assert v.reasons == ["malformed_dialogue"] and v.attribution == "user"


def test_no_tool_calls_turn_limit_fatal(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=False, facts=True)
    t = Trajectory(id="x", run_id="t", scenario_id=s.id, domain="shop", end_reason="user_stop",
                   messages=[{"role": "user", "content": s.intent}, {"role": "assistant", "content": "No."},
                             {"role": "user", "content": "###STOP###"}], final_hash=s.seed_hash)
    v = verdict(ws, rp, t)
    assert v.reasons == ["no_tool_calls", "state_mismatch"] and v.attribution == "agent"
    t = gold(env, s)
    t.end_reason = "turn_limit"
    assert verdict(ws, rp, t).reasons == ["turn_limit"]
    t = gold(env, s)
    t.end_reason, t.error = "fatal_error", "environment: SandboxError: worker died"
    v = verdict(ws, rp, t)
    assert v.reasons == ["fatal_error"] and v.attribution == "environment"
    # an agent prompt over the model's context is the agent's failure (scored); the user simulator's LLM
    # failing is the user's; other LLM failures (server down) are the environment's
    overflow = ("llm: LLMHTTPError: HTTP 400: This model's maximum context length is 4096 tokens "
                "(context_length_exceeded)")
    for error, who in ((overflow + " (agent turn)", "agent"), (overflow + " (user turn)", "user"),
                       ("llm: LLMTransportError: connection refused (agent turn)", "environment")):
        t.error = error
        assert verdict(ws, rp, t).attribution == who, error


def test_environment_errors_on_one_side_of_a_mismatch_are_the_environments(ws: Workspace, env: Environment,
                                                                            rp: Replayer) -> None:
    """A call that ran out of time during the rollout but not on replay: the record differs, not by the agent's doing."""
    s = _pick(ws, read_only=False)
    t = gold(env, s)
    tool_messages(t)[0]["content"] = f"Error: tool {s.gold_calls[0].name} exceeded its time limit of 2 s"
    v = verdict(ws, rp, t)
    assert "output_mismatch" in v.reasons and v.attribution == "environment"


def test_read_only_calls_exact_but_reads_commute(ws: Workspace, env: Environment, rp: Replayer) -> None:
    s = _pick(ws, read_only=True, min_calls=2)
    calls = [(c.name, c.arguments) for c in s.gold_calls]
    assert verdict(ws, rp, record(env, s, calls[::-1])).passed
    assert verdict(ws, rp, record(env, s, calls[:-1])).reasons == ["call_mismatch"]


def test_calls_match_orders_writes() -> None:
    kinds = {"r": "read", "w": "write"}
    a = [("r", {"x": 1}), ("w", {"y": 2}), ("w", {"y": 3})]
    assert calls_match([("r", {"x": 1.0}), ("w", {"y": 2}), ("w", {"y": 3})], a, kinds)
    assert not calls_match([("w", {"y": 2}), ("r", {"x": 1}), ("w", {"y": 3})], a, kinds)
    assert not calls_match([("r", {"x": 1}), ("w", {"y": 3}), ("w", {"y": 2})], a, kinds)


def test_user_never_gave_a_needed_fact(ws: Workspace, rp: Replayer) -> None:
    s = next(s for s in load_scenarios(ws, "shop") if not s.read_only and s.user_facts and any(
        str(v) in [str(a) for c in s.gold_calls for a in c.arguments.values()] for v in s.user_facts.values()))
    t = Trajectory(id="x", run_id="t", scenario_id=s.id, domain="shop", end_reason="user_stop",
                   messages=[{"role": "user", "content": "I want to change something."},
                             {"role": "assistant", "content": "Which account?"},
                             {"role": "user", "content": "I don't know. ###STOP###"}], final_hash=s.seed_hash)
    assert verdict(ws, rp, t).attribution == "user"
    t.messages[0]["content"] = s.intent  # now the facts were given: the agent is to blame
    assert verdict(ws, rp, t).attribution == "agent"


def test_stateful_tool_code_never_fails_an_honest_trajectory(tmp_path: Path) -> None:
    """Tool code that keeps state across episodes in a patched module: the shared-child replay of a
    later trajectory differs from its (fresh-child) record, so it is replayed in a fresh child,
    which agrees; it passes, and the instability is counted. A forged output is still caught."""
    ws = Workspace(tmp_path)
    dest = load_shop_builder()(ws.domain_dir("shop"))
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\nimport json\n_get_user = get_user\n\n\n"
                                   "def get_user(db, user_id):\n    json.seen = getattr(json, 'seen', 0) + 1\n"
                                   "    return {**_get_user(db, user_id), 'calls': json.seen}\n")
    build_scenarios(ws, "shop", per_domain=12, seed=1)
    with Environment.open(dest) as e:  # honest records: each in a fresh child, as the rollout engine runs them
        trajs = [record(e, s, [("get_user", {"user_id": "u1"})] + [(c.name, c.arguments) for c in s.gold_calls])
                 for s in load_scenarios(ws, "shop") if not s.read_only]
    assert len(trajs) >= 2
    forged = trajs[-1].model_copy(deep=True)
    tool_messages(forged)[0]["content"] = tool_messages(forged)[0]["content"].replace('"calls": 1', '"calls": 7')
    rep = verify_trajectories(ws, trajs + [forged])
    assert [t.verdict.passed for t in trajs] == [True] * len(trajs)
    assert forged.verdict.reasons == ["output_mismatch"] and forged.verdict.attribution == "environment"
    assert rep["replay"]["replayed_fresh"] >= len(trajs) and rep["replay"]["unstable"] >= len(trajs) - 1


def test_domain_that_cannot_replay_fails_its_trajectories_not_the_run(ws: Workspace, env: Environment,
                                                                      tmp_path: Path) -> None:
    s = _pick(ws, read_only=True)
    t = gold(env, s)
    with Replayer(tmp_path / "nowhere") as broken:  # no domain files there: the sandbox cannot start
        rep = verify_trajectories(ws, [t], replayer=broken)
    assert t.verdict.reasons == ["replay_failed"] and t.verdict.attribution == "environment"
    assert "shop" in rep["replay"]["failed_domains"] and rep["funnel"]["replayed"] == 0


def test_verify_run_writes_files_and_embeds_verdicts(ws: Workspace, env: Environment) -> None:
    scen = load_scenarios(ws, "shop")
    good = [gold(env, s).model_copy(update={"run_id": "vr", "id": trajectory_id("vr", s.id, 0),
                                            "agent_model": "gold-replay" if i == 0 else "m"})
            for i, s in enumerate(scen)]
    bad = gold(env, scen[0]).model_copy(update={"run_id": "vr", "id": trajectory_id("vr", scen[0].id, 1), "trial": 1,
                                                "end_reason": "turn_limit", "agent_model": "m"})
    run = ws.rollout_dir("vr")
    run.mkdir(parents=True)
    lines = [t.model_dump_json() for t in good + [bad]] + ['{"id": "torn']
    (run / TRAJECTORIES).write_text("\n".join(lines) + "\n")
    rep = verify_run(ws, "vr")
    assert rep["trajectories"] == len(scen) + 1 and rep["passed"] == len(scen) and rep["unreadable"] == 1
    assert rep["reasons"]["turn_limit"] == 1 and rep["funnel"]["completed"] == len(scen)
    assert rep["by_origin"] == {"agent": {"trajectories": len(scen), "passed": len(scen) - 1},
                                "gold-replay": {"trajectories": 1, "passed": 1}}
    assert rep["replay"]["trajectories"] == len(scen) + 1
    assert rep["pass^k"]["overall"]["pass^k"]["1"] == pytest.approx((len(scen) - 0.5) / len(scen), abs=1e-6)
    verified = [json.loads(x) for x in (run / "verified.jsonl").read_text().splitlines()]
    assert len(verified) == len(scen) + 1 and sum(r["verdict"]["passed"] for r in verified) == len(scen)
    embedded = [Trajectory.model_validate_json(x) for x in (run / TRAJECTORIES).read_text().splitlines()]
    assert all(t.verdict is not None for t in embedded) and len(embedded) == len(scen) + 1
    assert json.loads(Path(run / "verify.json").read_text())["run_id"] == "vr"


def test_call_arguments_keep_integers_past_64_bits_exact() -> None:
    """A call's arguments text is read with json, which keeps an integer past 64 bits exact (orjson
    would read it as a float, and the call would be checked and keyed as another call)."""
    from tasks.verify.verify import _args

    big = 123456789012345678901234567890
    got = _args('{"n": %d, "m": -9223372036854775809}' % big)
    assert got == {"n": big, "m": -9223372036854775809} and type(got["n"]) is int and type(got["m"]) is int
    assert _args('{"n": NaN}') is not None and _args("[1]") is None and _args("{") is None
