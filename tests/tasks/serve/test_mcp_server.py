"""`agentscaler serve DOMAIN --mcp`, driven by the MCP SDK's own client: over stdio (the CLI as a
subprocess) and over streamable HTTP (one `serve --http` process for the module). The domain is
the shop fixture with real gold-executed scenarios and one extra slow read tool (for a client that
disconnects mid-call); tool code runs in the server's sandbox workers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

from agentscaler.artifacts import domain_scenarios
from agentscaler.workspace import Workspace
from envs.episode import Environment
from envs.spec import DomainSpec, ToolSpec
from tasks.scenarios.build import build_scenarios
from tasks.serve.mcp_server import MAX_ARGUMENT_BYTES
from tasks.verify.verify import state_diff
from tests.conftest import load_shop_builder

AGENTSCALER = str(Path(sys.executable).parent / "agentscaler")
SLOW = "def slow_report(db) -> str:\n    import time\n    time.sleep(1.5)\n    return 'done'\n"


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shop fixture with 12 scenarios and a slow read tool (1.5 s)."""
    ws = Workspace(tmp_path_factory.mktemp("serve"))
    d = load_shop_builder()(ws.domain_dir("shop"))
    spec = DomainSpec.load(d)
    spec.tools.append(ToolSpec(name="slow_report", kind="read", description="A report that takes 1.5 s.",
                               parameters={"type": "object", "properties": {}}))
    (d / "tools.py").write_text((d / "tools.py").read_text() + "\n\n" + SLOW)
    (d / "spec.json").write_text(spec.model_dump_json(indent=2))
    build_scenarios(ws, "shop", per_domain=12, seed=1)
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_url(shop: Path):
    """`agentscaler serve DIR --mcp --http PORT` running for the module."""
    port = _free_port()
    proc = subprocess.Popen([AGENTSCALER, "serve", str(shop), "--mcp", "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            if proc.poll() is not None:
                pytest.fail(f"serve exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.3)
    yield url, proc
    proc.terminate()
    proc.wait(timeout=30)


def text(res: Any) -> str:
    return res.content[0].text


def payload(res: Any) -> Any:
    assert not res.isError, text(res)
    return json.loads(text(res))


async def _http_session(url: str, body) -> Any:
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write) as s:
            await s.initialize()
            return await body(s)


def run_http(url: str, body) -> Any:
    return anyio.run(_http_session, url, body)


def _leaves(exc: BaseException) -> list[BaseException]:
    return [x for e in exc.exceptions for x in _leaves(e)] if isinstance(exc, BaseExceptionGroup) else [exc]


def test_stdio_tools_read_write_reset_and_gold_diff(shop: Path):
    """The CLI over stdio: the domain's tools with their schemas; a read, a write and the state change
    it makes; reset back to the seed; a scenario scored as the verifier scores it (gold diff before,
    a pass after its gold calls)."""
    spec = DomainSpec.load(shop)
    scenario = next(s for s in domain_scenarios(shop) if not s.read_only)
    with Environment.open(shop) as env:  # what the verifier's own environment says for the same episode
        env.reset()
        want_before = state_diff(env.diff(), scenario.gold_diff)

    async def body() -> None:
        params = StdioServerParameters(command=AGENTSCALER, args=["serve", str(shop), "--mcp"], env={**os.environ})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                listed = {t.name: t for t in (await s.list_tools()).tools}
                for t in spec.tools:
                    assert listed[t.name].inputSchema == t.parameters
                    assert listed[t.name].description == t.description
                    assert listed[t.name].annotations.readOnlyHint == (t.kind == "read")
                assert {"episode-reset", "episode-state-hash", "episode-gold-diff", "episode-scenarios"} <= set(listed)

                seed_hash = payload(await s.call_tool("episode-state-hash", {}))["state_hash"]
                assert seed_hash == scenario.seed_hash
                assert payload(await s.call_tool("get_user", {"user_id": "u2"}))["email"] == "alan@example.com"
                wrote = payload(await s.call_tool("update_email", {"user_id": "u2", "email": "alan@turing.org"}))
                assert wrote["email"] == "alan@turing.org"
                assert payload(await s.call_tool("get_user", {"user_id": "u2"}))["email"] == "alan@turing.org"
                assert payload(await s.call_tool("episode-state-hash", {}))["state_hash"] != seed_hash

                obs = payload(await s.call_tool("episode-reset", {"scenario_id": scenario.id}))
                assert obs["intent"] == scenario.intent and obs["scenario_id"] == scenario.id
                assert payload(await s.call_tool("get_user", {"user_id": "u2"}))["email"] == "alan@example.com"
                assert payload(await s.call_tool("episode-state-hash", {}))["state_hash"] == seed_hash

                before = payload(await s.call_tool("episode-gold-diff", {}))
                assert before["state_matches"] is False and before["passed"] is False
                assert before["diff"] == want_before and before["diff"]
                for c in scenario.gold_calls:
                    assert not (await s.call_tool(c.name, c.arguments)).isError
                after = payload(await s.call_tool("episode-gold-diff", {}))
                assert after == {"scenario_id": scenario.id, "state_hash": scenario.gold_hash,
                                 "gold_hash": scenario.gold_hash, "state_matches": True, "calls_match": None,
                                 "passed": True, "diff": []}
                listed_scenarios = payload(await s.call_tool("episode-scenarios", {}))
                assert scenario.id in {x["id"] for x in listed_scenarios}
                assert all("gold_calls" not in x for x in listed_scenarios)

    anyio.run(body)


def test_read_only_scenario_is_scored_on_its_calls(shop: Path, http_url):
    """A read-only scenario passes only when the calls since the reset match its gold calls (the state
    never moves): with no call it fails, after its gold calls it passes."""
    scenario = next(s for s in domain_scenarios(shop) if s.read_only)

    async def body(s: ClientSession) -> tuple[dict, dict]:
        await s.call_tool("episode-reset", {"scenario_id": scenario.id})
        first = payload(await s.call_tool("episode-gold-diff", {}))
        for c in scenario.gold_calls:
            await s.call_tool(c.name, c.arguments)
        return first, payload(await s.call_tool("episode-gold-diff", {}))

    first, after = run_http(http_url[0], body)
    assert first["state_matches"] is True and first["calls_match"] is False and first["passed"] is False
    assert after["calls_match"] is True and after["passed"] is True


def test_two_http_sessions_do_not_see_each_others_writes(http_url):
    url = http_url[0]

    async def both() -> tuple[str, str, str]:
        async with streamablehttp_client(url) as (ra, wa, _), streamablehttp_client(url) as (rb, wb, _):
            async with ClientSession(ra, wa) as a, ClientSession(rb, wb) as b:
                await a.initialize()
                await b.initialize()
                seed = payload(await b.call_tool("episode-state-hash", {}))["state_hash"]
                async with anyio.create_task_group() as tg:  # both sessions at once
                    tg.start_soon(a.call_tool, "update_email", {"user_id": "u1", "email": "a@session.org"})
                    tg.start_soon(b.call_tool, "update_email", {"user_id": "u3", "email": "b@session.org"})
                a_sees = payload(await a.call_tool("get_user", {"user_id": "u3"}))["email"]
                b_sees = payload(await b.call_tool("get_user", {"user_id": "u1"}))["email"]
                assert payload(await b.call_tool("get_user", {"user_id": "u3"}))["email"] == "b@session.org"
                assert payload(await b.call_tool("episode-state-hash", {}))["state_hash"] != seed
                return a_sees, b_sees, seed

    a_sees, b_sees, seed = anyio.run(both)
    assert a_sees == "grace@example.com" and b_sees == "ada@example.com"
    # a new session starts from the seed, whatever the others wrote
    assert run_http(url, lambda s: s.call_tool("episode-state-hash", {})).content[0].text == \
        json.dumps({"state_hash": seed})


def test_bad_input_gets_a_clear_mcp_error_and_the_server_keeps_serving(http_url):
    url, proc = http_url

    async def body(s: ClientSession) -> list[Any]:
        return [await s.call_tool("no_such_tool", {"x": 1}),
                await s.call_tool("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 9}),
                await s.call_tool("get_user", {"user_id": "u1", "extra": True}),
                await s.call_tool("get_user", {"user_id": "x" * (MAX_ARGUMENT_BYTES + 10)}),
                await s.call_tool("episode-gold-diff", {"scenario_id": "nope"}),
                await s.call_tool("get_user", {"user_id": "u1"})]

    unknown, too_many, extra, oversized, bad_scenario, fine = run_http(url, body)
    assert unknown.isError and "unknown tool 'no_such_tool'" in text(unknown)
    assert too_many.isError and text(too_many).startswith("Error: invalid arguments for place_order at quantity")
    assert extra.isError and "invalid arguments for get_user" in text(extra) and "extra" in text(extra)
    assert oversized.isError and "too large" in text(oversized)
    assert bad_scenario.isError and "unknown scenario 'nope'" in text(bad_scenario)
    assert payload(fine)["name"] == "Ada Lovelace"

    # arguments past the transport's own limit (4 MiB): the SDK's HTTP transport answers 413, which
    # its client raises; a new session is served as before
    with pytest.raises(BaseExceptionGroup) as got:
        run_http(url, lambda s: s.call_tool("get_user", {"user_id": "x" * (5 << 20)}))
    flat = [e for e in _leaves(got.value) if isinstance(e, httpx.HTTPStatusError)]
    assert flat and flat[0].response.status_code == 413
    assert payload(run_http(url, lambda s: s.call_tool("get_user", {"user_id": "u3"})))["name"] == "Grace Hopper"
    assert proc.poll() is None


def test_client_disconnecting_mid_call_leaves_the_server_serving(http_url):
    url, proc = http_url

    async def leave_mid_call(s: ClientSession) -> bool:
        with anyio.move_on_after(0.4) as scope:
            await s.call_tool("slow_report", {})  # takes 1.5 s in the sandbox
        return scope.cancelled_caught

    assert run_http(url, leave_mid_call)  # the client really left before the answer
    got = run_http(url, lambda s: s.call_tool("slow_report", {}))
    assert text(got) == "done" and not got.isError
    assert payload(run_http(url, lambda s: s.call_tool("get_user", {"user_id": "u2"})))["name"] == "Alan Turing"
    assert proc.poll() is None


def test_serve_says_what_is_wrong_with_its_arguments(tmp_path: Path):
    # both commands at once: each is seconds of imports, and they share nothing
    procs = [subprocess.Popen([AGENTSCALER, "serve", "nope", *extra, "-w", str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for extra in (["--mcp"], [])]
    (out, err), (_, no_protocol_err) = (p.communicate(timeout=300) for p in procs)
    assert procs[0].returncode == 1 and "no finished environment named 'nope'" in err
    assert out == ""  # stdout belongs to the protocol
    assert procs[1].returncode == 2 and "--mcp" in no_protocol_err
