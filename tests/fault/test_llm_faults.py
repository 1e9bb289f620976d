"""LLM faults: a local endpoint (tests/fault/faulty_llm.py) that times out, answers 5xx/429/400, drops
or resets connections, never stops generating, or returns malformed tool-call JSON.

The endpoint is scripted (no model): these tests are about our own client, rollout engine,
verification and export. Every affected call is retried (transient) or fails with a reason, and
no malformed output reaches the SFT rows.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import pandas as pd
import pytest

from agentscaler.llm import LLMClient, LLMFormatError, LLMHTTPError, LLMTimeoutError, LLMTransportError
from tests.fault.faulty_llm import FAULTS, FaultyLLM

TRANSIENT = ("500", "429", "timeout", "drop", "reset", "endless")
FORMAT = ("malformed", "hermes_bad", "length", "not_json")
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order.",
                                           "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]
MSGS = [{"role": "user", "content": "where is my order?"}]


def _client(srv: FaultyLLM, retries: int = 2) -> LLMClient:
    return LLMClient(srv.url, model="faulty", timeout=1.0, max_retries=retries, backoff_initial=0.01, backoff_max=0.05)


async def _chat(client: LLMClient):
    async with client:
        return await client.chat(MSGS, tools=TOOLS, use_cache=False)


@pytest.mark.parametrize("fault", TRANSIENT)
def test_transient_fault_is_retried_and_succeeds(faulty_llm, fault):
    faulty_llm.inject(fault)
    client = _client(faulty_llm)
    reply = asyncio.run(_chat(client))
    assert reply.content == "How can I help you?"  # the retry got the real answer
    assert faulty_llm.requests == 2 and client.stats()["rollout"]["retries"] == 1


@pytest.mark.parametrize("fault,error,reason", [
    ("500", LLMHTTPError, "HTTP 500"), ("429", LLMHTTPError, "HTTP 429"),
    ("drop", LLMTransportError, "RemoteProtocolError"), ("timeout", LLMTimeoutError, "within 1.0s"),
    ("endless", LLMTimeoutError, "within 1.0s")])
def test_persistent_transient_fault_fails_with_reason_after_retries(faulty_llm, fault, error, reason):
    faulty_llm.inject(*[fault] * 3)
    with pytest.raises(error, match=reason):
        asyncio.run(_chat(_client(faulty_llm, retries=2)))
    assert faulty_llm.requests == 3  # 1 + 2 retries, then a clear error


@pytest.mark.parametrize("fault", ("400",) + FORMAT)
def test_non_transient_fault_fails_at_once_with_raw_text(faulty_llm, fault):
    faulty_llm.inject(fault)
    with pytest.raises((LLMFormatError, LLMHTTPError)) as info:
        asyncio.run(_chat(_client(faulty_llm)))
    assert faulty_llm.requests == 1  # never retried: the same request would fail the same way
    if isinstance(info.value, LLMFormatError):
        assert info.value.raw  # the offending text is kept for the report
        assert any(w in str(info.value) for w in ("not valid JSON", "not JSON", "cut off at max_tokens")), info.value


def _malformed(text: str) -> bool:
    return any(s in text for s in ('"count": 3,,', "<tool_call>", "</tool_call>", "<html>", "aaaaaa"))


def test_rollout_verify_export_under_random_faults_keep_malformed_output_out(clean_pipeline, tmp_path):
    """Real sandboxed rollouts of the clean run's scenarios against an endpoint that fails 35% of requests."""
    from agentscaler.workspace import Workspace
    from tasks.rollouts.conversation import RolloutConfig
    from tasks.rollouts.engine import run_rollouts
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tasks.verify.verify import verify_run

    src, _, _ = clean_pipeline
    ws_root = tmp_path / "ws"
    shutil.copytree(src, ws_root, ignore=shutil.ignore_patterns("rollouts", "sft"))
    ws = Workspace(ws_root)
    with FaultyLLM(ws_root, fault_rate=0.35, hang_s=3, seed=7) as srv:
        rep = run_rollouts(ws, srv.url, model="faulty", split="all", trials=3, run_id="rfaults", concurrency=2,
                           timeout=1.0, use_cache=False,
                           cfg=RolloutConfig(max_turns=3, max_steps=4, retry_wait=0.01, turn_retries=2))
        injected = srv.faults_served()
    assert injected >= 5, srv.served
    assert rep["written"] == rep["planned"] and not rep["errors"]  # every conversation recorded, none lost
    trajs = [json.loads(line) for line in (ws.rollout_dir("rfaults") / "trajectories.jsonl").read_text().splitlines()]
    assert len({t["id"] for t in trajs}) == len(trajs) == rep["planned"]
    for t in trajs:  # a fatal end always says why
        assert t["end_reason"] != "fatal_error" or t["error"].startswith(("llm:", "environment:"))
    vrep = verify_run(ws, "rfaults")
    hit = [t for t in trajs if t["tokens"].get("n_format_errors")]
    check_contamination(ws, sources=("tau2",))  # the export refuses unscreened scenarios
    exp = export_sft(ws, run_ids=["rfaults"], eval_fraction=0.0)
    rows = pd.concat([pd.read_parquet(ws.sft_dir / "stage1" / f"{s}.parquet") for s in ("train", "eval")])
    assert len(rows) == exp["kept"]["stage1"]["train"] + exp["kept"]["stage1"]["eval"] > 0
    verdicts = {json.loads(line)["trajectory_id"]: json.loads(line)["verdict"]
                for line in (ws.rollout_dir("rfaults") / "verified.jsonl").read_text().splitlines()}
    for t in hit:  # a conversation that saw a malformed reply is never training data
        assert not verdicts[t["id"]]["passed"] and "malformed_dialogue" in verdicts[t["id"]]["reasons"]
    assert set(rows["trajectory_id"]).isdisjoint(t["id"] for t in hit)
    for _, r in rows.iterrows():
        names = {x["function"]["name"] for x in json.loads(r["tools"])}
        for m in r["messages"]:
            assert not _malformed(m.get("content") or ""), m
            for c in m.get("tool_calls") or []:
                c = c if isinstance(c, dict) else json.loads(c)
                args = c["function"]["arguments"]
                args = json.loads(args) if isinstance(args, str) else args
                assert isinstance(args, dict) and c["function"]["name"] in names
    assert vrep["unreadable"] == 0


def test_all_fault_kinds_are_known():
    assert set(TRANSIENT) | set(FORMAT) | {"400"} == set(FAULTS)
