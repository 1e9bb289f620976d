"""Both servers with the real SmolLM2 on real prompts (the shop domain's system prompt and tools, the
agent's own prompt builder): every tool call that comes back names an offered tool and has arguments
the environment's own check accepts (agentscaler.schemas.check), whether the call was forced or the
model chose it (the grammar triggered at `<tool_call>`); text replies still get through.

The llama.cpp server serves the shipped GGUF (the session's local_llm); the checkpoint server serves
SmolLM2's HF conversion (training/gguf_convert.py), the fallback runtime for trained checkpoints."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from agentscaler.llm import LLMClient, LLMFormatError
from agentscaler.schemas import check
from envs.spec import DomainSpec
from tasks.rollouts.agent import domain_setup

pytestmark = [pytest.mark.llm, pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                                  reason="llama-cpp-python not installed")]


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    from tests.conftest import load_shop_builder

    spec = DomainSpec.load(load_shop_builder()(tmp_path_factory.mktemp("shop") / "shop"))
    return domain_setup(spec)


def requests(shop) -> list[tuple[list[dict], str | None]]:
    """Forced calls, calls the model may choose after a worked example, and plain chat."""
    tools, system = shop
    example = [{"role": "user", "content": "Show me the profile of user u1."},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                   "name": "get_user", "arguments": '{"user_id": "u1"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "name": "get_user",
                "content": '{"user_id": "u1", "name": "Ada", "email": "ada@example.com", "balance": 120.0}'},
               {"role": "assistant", "content": "User u1 is Ada (ada@example.com), balance 120.0."}]
    out: list[tuple[list[dict], str | None]] = []
    for text in ("Cancel my order o2 please.", "I want 2 of product p3 for user u2."):
        out.append(([{"role": "system", "content": system}, {"role": "user", "content": text}], "required"))
    for text in ("Now list the orders of user u2.", "And find products called lamp under 30 dollars."):
        out.append(([{"role": "system", "content": system}, *example, {"role": "user", "content": text}], None))
    out.append(([{"role": "system", "content": system}, {"role": "user", "content": "Hello! Who are you?"}], None))
    return out


def run_checks(url: str, shop, which: list[int], max_tokens: int = 80) -> dict[str, int]:
    """Send the chosen requests once; count calls (all must be valid), text replies and cut-off calls."""
    tools, _ = shop
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    counts = {"calls": 0, "chosen_calls": 0, "text": 0, "cut_off": 0, "requests": 0}

    async def go() -> None:
        async with LLMClient(url, concurrency=1, timeout=600, max_retries=0) as client:
            for i in which:
                messages, choice = requests(shop)[i]
                counts["requests"] += 1
                try:
                    reply = await client.chat(messages, tools=tools, tool_choice=choice, temperature=0.7, seed=i,
                                              max_tokens=max_tokens, use_cache=False)
                except LLMFormatError as exc:
                    assert "cut off" in str(exc), exc.raw  # the only way a constrained call can fail
                    counts["cut_off"] += 1
                    continue
                for call in reply.tool_calls:
                    assert call["name"] in schemas, call
                    assert check(schemas[call["name"]]).errors(call["arguments"]) == [], call
                    counts["calls"] += 1
                    counts["chosen_calls"] += choice is None
                if not reply.tool_calls:
                    assert choice is None and isinstance(reply.content, str)
                    counts["text"] += bool(reply.content.strip())

    asyncio.run(go())
    return counts


def test_llama_server_emits_only_schema_valid_calls(local_llm, shop):
    counts = run_checks(local_llm, shop, [0, 1, 2, 3, 4])
    assert counts["calls"] >= 2 and counts["text"] >= 1, counts


@pytest.mark.slow
def test_checkpoint_server_emits_only_schema_valid_calls(shop, tmp_path):
    from agentscaler.hf_server import hf_server
    from training.gguf_convert import convert_smollm2

    # One torch thread: on a loaded 2-core machine two threads spin against each other (measured at
    # load 20: 7.8 s per decoded token with two threads, 0.46 s with one; the request 335 s vs 38 s).
    with hf_server(convert_smollm2(), threads=1, log_path=tmp_path / "hf.log") as url:
        counts = run_checks(url, shop, [0, 4], max_tokens=48)  # a forced call and plain chat (CPU fp32 is slow)
    assert counts["calls"] >= 1 and counts["text"] >= 1, counts
