"""The HF checkpoint server: a tiny random Llama (SmolLM2 tokenizer, training chat template) saved to
a temp dir, served in a real subprocess, and queried through the real LLMClient."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from agentscaler.hf_server import HFServerError, hf_server, normalize_messages
from agentscaler.llm import LLMClient, LLMFormatError

TOOLS = [{"type": "function", "function": {
    "name": "get_user_details", "description": "Get a user's details by id.",
    "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}}]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from training.chat_template import CHAT_TEMPLATE
    from training.gguf_convert import load_tokenizer
    from training.tiny import TinyModelConfig, build_tiny_model

    tok = load_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1))
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    assert tok.chat_template == CHAT_TEMPLATE
    return out


@pytest.fixture(scope="module")
def served(tiny_checkpoint, tmp_path_factory):
    log = tmp_path_factory.mktemp("hflog") / "server.log"
    with hf_server(tiny_checkpoint, max_new_tokens=16, threads=1, log_path=log) as url:
        yield url


def _chat(url: str, **kw):
    async def go():
        async with LLMClient(url, model="tiny", concurrency=1, timeout=120) as client:
            return await client.chat(**kw)
    return asyncio.run(go())


def test_models_endpoint_and_plain_chat(served, tiny_checkpoint):
    models = httpx.get(f"{served}/models", timeout=10).json()
    assert models["data"][0]["id"] == tiny_checkpoint.name
    reply = _chat(served, messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    assert isinstance(reply.content, str) and reply.tool_calls == []
    assert reply.finish_reason in ("stop", "length")
    assert reply.usage["prompt_tokens"] > 5 and 1 <= reply.usage["completion_tokens"] <= 8
    assert reply.usage["total_tokens"] == reply.usage["prompt_tokens"] + reply.usage["completion_tokens"]
    again = _chat(served, messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    assert again.content == reply.content  # greedy at temperature 0


def test_tools_request_renders_tools_and_history(served):
    """A full tool-calling history (assistant call with string arguments, tool result) is accepted;
    the tools make the prompt longer, so the template rendered them."""
    history = [{"role": "user", "content": "who is u1?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                   "name": "get_user_details", "arguments": '{"user_id": "u1"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": '{"name": "Ada"}'}]
    with_tools = _chat(served, messages=history, tools=TOOLS, max_tokens=6, temperature=0.7)
    without = _chat(served, messages=history, max_tokens=6)
    assert with_tools.usage["prompt_tokens"] > without.usage["prompt_tokens"] + 40
    assert with_tools.raw["object"] == "chat.completion"
    assert with_tools.raw["choices"][0]["message"]["role"] == "assistant"


def test_forced_call_cut_off_is_reported_by_the_client(served):
    """tool_choice='required' starts the reply with <tool_call>; cut off at max_tokens, the client's
    strict parser raises LLMFormatError with the raw text (never repaired)."""
    with pytest.raises(LLMFormatError, match="cut off|tool_call|JSON") as ei:
        _chat(served, messages=[{"role": "user", "content": "who is u1?"}], tools=TOOLS, tool_choice="required",
              max_tokens=2)
    assert "<tool_call>" in (ei.value.raw or "")


def test_bad_requests_are_4xx(served):
    r = httpx.post(f"{served}/chat/completions", content=b"not json", timeout=10)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{served}/chat/completions", json={"messages": []}, timeout=10)
    assert r.status_code == 400 and "non-empty" in r.json()["error"]["message"]
    r = httpx.post(f"{served}/chat/completions", json={"messages": [{"role": "wizard", "content": "x"}]}, timeout=10)
    assert r.status_code == 400 and "unsupported message" in r.json()["error"]["message"]


def test_normalize_messages_decodes_arguments():
    msgs = normalize_messages([{"role": "assistant", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}])
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_not_a_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(HFServerError, match="no config.json"), hf_server(tmp_path):
        pass


def test_server_that_dies_reports_its_log(tmp_path):
    (tmp_path / "config.json").write_text("{broken")
    log = tmp_path / "server.log"
    with pytest.raises(HFServerError, match="exited with code") as ei, \
            hf_server(tmp_path, log_path=log, startup_timeout=120):
        pass
    assert "Traceback" in str(ei.value) or "Error" in str(ei.value)


def test_sigterm_to_a_process_serving_a_checkpoint_leaves_no_server(tiny_checkpoint, tmp_path):
    """Issue 22, class 11: the checkpoint server runs in its own session; SIGTERM to the process that
    started it used to leave it running. Stopped by: the server's parent-death signal."""
    import signal
    import subprocess
    import sys

    from tests.fault.orphans import descendants, wait_gone

    script = ("import sys, time\nfrom agentscaler.hf_server import hf_server\n"
              "with hf_server(sys.argv[1], threads=1, log_path=sys.argv[2]):\n"
              "    print('ready', flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tiny_checkpoint), str(tmp_path / "s.log")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        kids = descendants(proc.pid)
        assert kids
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        assert not wait_gone(kids), "the checkpoint server outlived SIGTERM to its caller"
    finally:
        proc.kill()
        proc.wait()
