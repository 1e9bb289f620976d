"""Rollout engine: recording, resume after a crash, stop refusal, turn retries, fatal errors.

Most tests talk to a *scripted* OpenAI-compatible endpoint (benchmarks/scripted_llm.py, a real
HTTP server answering from a script, not a model) because they test our engine's logic. One
test (`-m llm`) runs the real local SmolLM2 server end to end, with the LLM user.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from agentscaler.artifacts import TRAJECTORIES
from agentscaler.llm_server import free_port
from agentscaler.models import Trajectory
from agentscaler.workspace import Workspace, read_jsonl
from agentscaler.hashing import content_hash
from tasks.rollouts.conversation import END_REASONS, RolloutConfig, pending_write, settled_failure, trajectory_id
from tasks.rollouts.engine import default_run_id, run_rollouts, select_scenarios
from tasks.rollouts.users import NUDGE, announces_action
from tasks.rollouts.writer import TrajectoryWriter
from tasks.scenarios.build import build_scenarios
from tasks.verify.verify import verify_run, verify_trajectories
from tests.conftest import load_shop_builder
from tests.llm_fixtures import local_llm  # noqa: F401 - session fixture
from tests.scripted_endpoint import scripted_endpoint

UNSAFE = os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("rollout"))
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=6, seed=3)
    return ws


def scripted_server(ws: Workspace | None = None, mode: str = "oracle", delay: float = 0.01, fail_first: int = 0):
    scenarios = [ws.domain_dir("shop") / "scenarios.jsonl"] if ws is not None else []
    return scripted_endpoint(mode, scenarios, delay=delay, fail_first=fail_first)


def _cfg(**kw) -> RolloutConfig:
    return RolloutConfig(unsafe=UNSAFE, **kw)


def test_announcement_detection() -> None:
    assert announces_action("Sure, I'll cancel order o1 now.")
    assert announces_action("One moment please")
    assert not announces_action("Your order o1 has been cancelled.")
    assert pending_write([{"role": "assistant", "content": "I am going to update the email."}])
    assert not pending_write([{"role": "assistant", "content": "I will do it",
                               "tool_calls": [{"id": "a", "function": {"name": "x", "arguments": "{}"}}]}])


def test_oracle_rollout_records_verifies_and_resumes_after_a_crash(ws: Workspace) -> None:
    """Scripted oracle agent + scripted user: every trajectory is complete, stored once, and passes."""
    n = len(select_scenarios(ws, "all"))
    with scripted_server(ws) as url:
        rep = run_rollouts(ws, url, model="scripted", trials=2, split="all", cfg=_cfg(), run_id="ok", use_cache=False)
        assert rep["written"] == 2 * n and rep["end_reasons"] == {"user_stop": 2 * n} and not rep["errors"]
        path = ws.rollout_dir("ok") / TRAJECTORIES
        trajs = [Trajectory.model_validate(r) for r in read_jsonl(path)]
        assert {t.id for t in trajs} == {trajectory_id("ok", t.scenario_id, t.trial) for t in trajs}
        t = trajs[0]
        assert [m["role"] for m in t.messages[:2]] == ["system", "user"] and t.tools and t.final_hash
        assert t.tokens["agent_prompt"] > 0 and t.timings["total_s"] > 0 and t.user_kind == "scripted"
        v = verify_run(ws, "ok")
        assert v["passed"] == 2 * n and v["pass^k"]["overall"]["pass^k"]["2"] == 1.0

        # crash: the last two trajectories are lost, the one before is torn mid-line
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
        rep2 = run_rollouts(ws, url, model="scripted", trials=2, split="all", cfg=_cfg(), run_id="ok", use_cache=False)
        assert rep2["skipped_existing"] == 2 * n - 3 and rep2["written"] == 3
        ids = [json.loads(x)["id"] for x in path.read_text().splitlines()]
        assert len(ids) == len(set(ids)) == 2 * n
        rep3 = run_rollouts(ws, url, model="scripted", trials=2, split="all", cfg=_cfg(), run_id="ok", use_cache=False)
        assert rep3["written"] == 0 and rep3["skipped_existing"] == 2 * n


def test_the_agent_sends_its_repetition_penalty(ws: Workspace) -> None:
    """Every agent request carries RolloutConfig.repeat_penalty (1.0 by default; none when None: the
    server's default), as the scripted endpoint counts them (the test is about what we send)."""
    with scripted_server(ws) as url:
        run_rollouts(ws, url, model="scripted", split="all", max_scenarios=1, cfg=_cfg(), run_id="rp", use_cache=False)
        run_rollouts(ws, url, model="scripted", split="all", max_scenarios=1, run_id="rp-server",
                     cfg=_cfg().model_copy(update={"repeat_penalty": None}), use_cache=False)
        seen = httpx.get(url + "/stats").json()["agent_repeat_penalty"]
    assert set(seen) == {"1.0", "null"} and min(seen.values()) >= 2  # a call and the answer after it, each run


def test_run_lock_keeps_a_second_writer_out(ws: Workspace) -> None:
    w = TrajectoryWriter(ws.rollout_dir("locked"))
    try:
        with pytest.raises(RuntimeError, match="another process"):
            TrajectoryWriter(ws.rollout_dir("locked"))
    finally:
        w.close()


def test_stop_refused_while_agent_announces_an_action(ws: Workspace) -> None:
    """Scripted chatty agent (always announces, never acts) + LLM user played by the scripted
    endpoint (always stops): the stop is refused twice with a nudge, then accepted."""
    sc = select_scenarios(ws, "all")[:1]
    with scripted_server(ws, mode="chatty") as url:
        rep = run_rollouts(ws, url, model="scripted", split="all", max_scenarios=1, run_id="chatty",
                           cfg=_cfg(user="llm"), use_cache=False)
    assert rep["written"] == 1
    t = Trajectory.model_validate(read_jsonl(ws.rollout_dir("chatty") / TRAJECTORIES)[0])
    assert t.scenario_id == sc[0].id and t.end_reason == "user_stop" and t.tokens["n_stop_refused"] == 2
    assert [m["content"] for m in t.messages if m["role"] == "user"][1:] == [NUDGE, NUDGE, "Thanks. ###STOP###"]
    v = verify_run(ws, "chatty")
    assert v["reasons"]["no_tool_calls"] == 1 and v["attribution"]["agent"] == 1


def test_settled_failure_follows_the_verifiers_rules() -> None:
    def call(name: str, args: str) -> dict:
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": args}}]}

    tool = {"role": "tool", "tool_call_id": "c", "content": "{}"}
    same = [call("get", '{"id": 1}'), tool, call("get", '{"id": 1.0}'), tool]  # 1 == 1.0 by value
    assert not settled_failure(same, 0)
    assert settled_failure([*same, call("get", '{"id": 1}')], 0)
    assert not settled_failure([*same, call("get", '{"id": 2}')], 0)
    assert settled_failure([{"role": "user", "content": "hi"}], 1)  # a malformed reply fails a trajectory
    text = {"role": "assistant", "content": "How can I help? "}
    assert settled_failure([text, text, {"role": "assistant", "content": "How can I help?"}], 0)


def test_a_looping_agent_is_stopped_once_its_failure_is_settled(ws: Workspace) -> None:
    """Scripted looping agent (its first gold call after every result): with stop_when_failed the
    conversation ends at the third identical call, with the verdict the full conversation gets."""
    runs = {}
    with scripted_server(ws, mode="looper") as url:
        for stop in (False, True):
            run_id = f"looper-{stop}"
            run_rollouts(ws, url, model="scripted", split="all", max_scenarios=1, run_id=run_id, use_cache=False,
                         cfg=_cfg(max_turns=2, max_steps=4, stop_when_failed=stop))
            v = verify_run(ws, run_id)
            t = Trajectory.model_validate(read_jsonl(ws.rollout_dir(run_id) / TRAJECTORIES)[0])
            runs[stop] = (t, v)
    (full, v_full), (cut, v_cut) = runs[False], runs[True]
    assert full.end_reason != "settled_failure" and full.tokens["n_agent_turns"] == 8  # 2 turns x the step limit
    assert cut.end_reason == "settled_failure" and cut.tokens["n_agent_turns"] == cut.tokens["n_tool_calls"] == 3
    reasons = {stop: {k for k, n in v["reasons"].items() if n} for stop, (_, v) in runs.items()}
    assert v_full["passed"] == v_cut["passed"] == 0 and "repetition" in reasons[True]
    assert reasons[True] <= reasons[False]
    assert "fatal_error" not in reasons[True]  # a settled stop is not a cut-short conversation
    assert {k: n for k, n in v_cut["attribution"].items() if n} == {"agent": 1}
    # a conversation that claims a settled stop but holds no repetition was cut short: a fatal error
    forged = cut.model_copy(update={"messages": cut.messages[:-2], "verdict": None})
    verify_trajectories(ws, [forged])
    assert "fatal_error" in forged.verdict.reasons and "repetition" not in forged.verdict.reasons


def test_run_ids_made_without_the_settled_stop_are_unchanged() -> None:
    """A run made before stop_when_failed and repeat_penalty existed resumes: the first enters the id
    only when on, the second only when sent (None: the server's default, as those runs had)."""
    cfg = RolloutConfig(repeat_penalty=None)
    before = cfg.model_dump(exclude={"max_in_flight", "unsafe", "turn_retries", "retry_wait", "stop_when_failed",
                                     "repeat_penalty"})
    old = "r" + content_hash({"model": "m", "cfg": before, "trials": 1, "scenarios": ["a"]}, 12)
    assert default_run_id("m", cfg, 1, ["a"]) == old
    assert default_run_id("m", cfg.model_copy(update={"stop_when_failed": True}), 1, ["a"]) != old
    assert default_run_id("m", RolloutConfig(), 1, ["a"]) != old  # the default sends 1.0: another decoding


def test_transient_server_errors_retry_the_turn(ws: Workspace) -> None:
    """The scripted endpoint answers 503 to its first requests; the client does not retry
    (max_retries=0 through timeout settings below), so the engine's turn retry must."""
    import asyncio

    from agentscaler.llm import LLMClient
    from tasks.rollouts.engine import rollout_async

    scen = select_scenarios(ws, "all")[:2]

    async def go(url: str) -> dict:
        async with LLMClient(url, model="scripted", concurrency=2, max_retries=0) as c:
            return await rollout_async(ws, scen, "flaky", c, cfg=_cfg(retry_wait=0.05, turn_retries=3))

    with scripted_server(ws, fail_first=3) as url:
        rep = asyncio.run(go(url))
    trajs = [Trajectory.model_validate(r) for r in read_jsonl(ws.rollout_dir("flaky") / TRAJECTORIES)]
    assert rep["written"] == 2 and all(t.end_reason == "user_stop" for t in trajs)
    assert sum(t.tokens.get("n_turn_retries", 0) for t in trajs) >= 2


def test_unreachable_server_is_a_fatal_error_of_the_environment(ws: Workspace) -> None:
    import asyncio

    from agentscaler.llm import LLMClient
    from tasks.rollouts.engine import rollout_async

    scen = select_scenarios(ws, "all")[:1]

    async def go() -> dict:
        async with LLMClient(f"http://127.0.0.1:{free_port()}/v1", model="none", max_retries=0) as c:
            return await rollout_async(ws, scen, "dead", c, cfg=_cfg(retry_wait=0.01, turn_retries=1))

    rep = asyncio.run(go())
    assert rep["end_reasons"] == {"fatal_error": 1}
    t = Trajectory.model_validate(read_jsonl(ws.rollout_dir("dead") / TRAJECTORIES)[0])
    assert t.error.startswith("llm: LLMTransportError") and t.error.endswith("(agent turn)")
    assert verify_run(ws, "dead")["attribution"]["environment"] == 1


@pytest.mark.llm
def test_real_local_llm_rollout_is_well_formed_and_stored(ws: Workspace, local_llm: str) -> None:  # noqa: F811
    """Real SmolLM2-135M as agent and LLM user on one shop scenario; checks the record, not success."""
    rep = run_rollouts(ws, local_llm, split="all", max_scenarios=1, run_id="real", concurrency=2, timeout=120,
                       cfg=_cfg(user="llm", max_turns=1, max_steps=1, max_tokens=32, user_max_tokens=24,
                                max_stop_refusals=0), use_cache=False)
    assert rep["written"] == 1 and not rep["errors"], rep
    t = Trajectory.model_validate(read_jsonl(ws.rollout_dir("real") / TRAJECTORIES)[0])
    assert t.end_reason in END_REASONS and t.user_kind == "llm" and t.agent_model == "smollm2-135m"
    assert t.messages[0]["role"] == "system" and t.messages[1]["role"] == "user"
    assert any(m["role"] == "assistant" for m in t.messages) and t.final_hash
    assert t.tokens["agent_prompt"] > 0 and t.tokens["user_prompt"] > 0
    print("real rollout timings", t.timings, t.tokens)
    v = verify_run(ws, "real")
    assert v["trajectories"] == 1 and sum(v["attribution"].values()) == 1


def test_cli_rollout_and_verify(ws: Workspace) -> None:
    """`agentscaler rollout` / `verify` --json against the scripted oracle endpoint."""
    from typer.testing import CliRunner

    from flows.cli import app

    runner = CliRunner()
    with scripted_server(ws) as url:
        res = runner.invoke(app, ["-w", str(ws.root), "rollout", "--llm", url, "--model", "scripted", "--split", "all",
                                  "--max-scenarios", "2", "--trials", "2", "--run", "cli", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["run_id"] == "cli" and out["written"] == 4
    res = runner.invoke(app, ["-w", str(ws.root), "verify", "--run", "cli", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["trajectories"] == 4 and rep["passed"] == 4 and rep["pass^k"]["overall"]["pass^k"]["2"] == 1.0
    assert runner.invoke(app, ["-w", str(ws.root), "verify", "--run", "nope", "--json"]).exit_code == 1


@pytest.mark.slow
def test_prefect_experience_task_one_domain_batch(ws: Workspace, prefect_harness) -> None:
    """flows/collect_experience's Prefect task (one domain's batch: rollouts, then verification) in a
    real flow, against the scripted endpoint."""
    from prefect import flow

    from flows.collect_experience import experience_task

    with scripted_server(ws) as url:
        @flow
        def one() -> dict:
            return experience_task("shop", str(ws.root), [url], "prefect", "scripted", 1, "all", 2,
                                   _cfg().model_dump(), 2)

        rep = one()
    assert rep["run_id"] == "prefect--shop" and rep["rollout"]["written"] == 2
    assert rep["trajectories"] == 2 and rep["passed"] == 2


def test_each_conversation_keeps_one_single_slot_server(ws: Workspace) -> None:
    """Two single-slot scripted servers: every agent turn of a conversation goes to the same server
    (its lane, so a llama.cpp prompt cache keeps its prefix), both servers are used, and one
    conversation is in flight per server. The client records which server answered each turn."""
    import asyncio
    from collections import defaultdict

    from agentscaler.llm import LLMClient
    from tasks.rollouts.engine import rollout_async

    scen = select_scenarios(ws, "all")
    served: dict[tuple[str, int], list[str]] = defaultdict(list)

    class Recording(LLMClient):
        async def chat(self, messages, *args, **kwargs):  # type: ignore[override]
            reply = await super().chat(messages, *args, **kwargs)
            if kwargs.get("stage") == "rollout_agent":  # a conversation: its opening and its trial
                served[(json.dumps(messages[:2]), kwargs["cache_salt"])].append(reply.endpoint)
            return reply

    async def go(urls: list[str]) -> dict:
        async with Recording(urls, model="scripted", concurrency=1) as c:
            return await rollout_async(ws, scen, "lanes", c, trials=2, cfg=_cfg())

    with scripted_server(ws, delay=0.02) as a, scripted_server(ws, delay=0.02) as b:
        rep = asyncio.run(go([a, b]))
    assert rep["written"] == 2 * len(scen) and rep["max_in_flight"] == 2 and not rep["errors"]
    assert len(served) == 2 * len(scen) and sum(map(len, served.values())) > len(served)  # several turns each
    assert all(len(set(v)) == 1 for v in served.values()), served
    assert {v[0] for v in served.values()} == {a, b}
