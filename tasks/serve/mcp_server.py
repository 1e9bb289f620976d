"""`agentscaler serve DOMAIN --mcp`: one domain's environment served to any agent over MCP.

The domain's tools are MCP tools (name, description, the parameters' JSON Schema as inputSchema,
readOnlyHint for read tools). Four more tools, spelled with hyphens so that no tool of a domain
(a Python identifier) can take their name, run the episode and score it:

- `episode-reset {scenario_id?}`: a fresh copy of the seed; with a scenario, its public fields
  (intent, user facts) as the observation;
- `episode-state-hash`: the canonical hash of the episode's state (what the verifier compares);
- `episode-gold-diff {scenario_id?}`: the scenario's gold check as the verifier makes it
  (tasks.verify.verify): the state hash against the gold hash, the field diff final vs gold
  (`state_diff`), and for a read-only scenario whether the successful calls since the reset match
  the gold calls (`calls_match`). The verifier's dialogue checks (what was said) are not made here.
- `episode-scenarios`: the domain's scenarios an outside agent can be given (id, split, read_only,
  intent, user facts; never the gold calls).

Each client session gets its own episode: the MCP SDK enters the server's lifespan once per
session (`Server.run`), and the lifespan holds that session's `envs.episode.Environment`, opened
on first use and closed when the session ends. Tool code runs only in that environment's sandbox
worker; arguments are checked by `Environment.call` (agentscaler.schemas, the one validator)
before the worker sees them, so the SDK's own jsonschema check is off. One session's calls run
one at a time (its environment is not thread-safe), in a worker thread, so other sessions go on.
A tool error, an unknown tool or bad arguments come back as an MCP tool result with isError and
the text an agent would see ("Error: ..."); the server goes on serving.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount

from agentscaler.artifacts import domain_scenarios
from agentscaler.models import Scenario
from envs.episode import Environment, ToolResult
from envs.spec import DomainSpec
from tasks.verify.verify import calls_match, state_diff

RESET, STATE_HASH, GOLD_DIFF, SCENARIOS = "episode-reset", "episode-state-hash", "episode-gold-diff", "episode-scenarios"
MAX_ARGUMENT_BYTES = 1 << 20  # a tool call's arguments as JSON; larger ones are refused before any check
MAX_SESSIONS = 64  # HTTP sessions at once: each holds a sandbox worker (the SDK's default is 10,000)
SESSION_IDLE_S = 600.0  # an HTTP session idle this long is closed, and its worker with it
_SCENARIO_ARG = {"type": "object", "additionalProperties": False,
                 "properties": {"scenario_id": {"type": "string", "description": "A scenario id (episode-scenarios)."}}}


class Episode:
    """One MCP session's episode: its environment (opened on first use), the scenario it was reset
    to, and its successful calls since the reset (for a read-only scenario's call check)."""

    def __init__(self, domain_dir: Path, unsafe: bool):
        self.domain_dir, self.unsafe = domain_dir, unsafe
        self.env: Environment | None = None
        self.scenario: Scenario | None = None
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = anyio.Lock()

    def environment(self) -> Environment:
        if self.env is None:
            self.env = Environment.open(self.domain_dir, unsafe=self.unsafe, spin_us=0)  # calls come far apart
            self.env.reset()
        return self.env

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


class DomainServer:
    """The MCP server of one domain folder (a workspace's domains/<id>/ or an export-env folder)."""

    def __init__(self, domain_dir: Path | str, unsafe: bool = False):
        self.domain_dir = Path(domain_dir)
        self.spec = DomainSpec.load(self.domain_dir)
        self.kinds = {t.name: t.kind for t in self.spec.tools}
        self.scenarios = {s.id: s for s in domain_scenarios(self.domain_dir)}
        self.unsafe = unsafe
        self.server: Server[Episode, Any] = Server(f"agentscaler-{self.spec.id}", lifespan=self._lifespan,
                                                   instructions=self._instructions())
        self.server.list_tools()(self._list_tools)
        self.server.call_tool(validate_input=False)(self._call_tool)  # Environment.call validates

    def _instructions(self) -> str:
        return (f"{self.spec.name}: {self.spec.description}".strip(": ") +
                f"\nTools of domain {self.spec.id} run on this session's own episode (a copy of the seed "
                f"database). {RESET} starts over (optionally on a scenario), {STATE_HASH} gives the state's "
                f"hash, {GOLD_DIFF} scores the episode against a scenario's gold state.")

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Server) -> AsyncIterator[Episode]:
        episode = Episode(self.domain_dir, self.unsafe)
        try:
            yield episode
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(episode.close)

    def tools(self) -> list[types.Tool]:
        """The domain's tools, then the episode tools."""
        out = []
        for t in self.spec.tools:
            schema = t.parameters if t.parameters.get("type") == "object" else {"type": "object", **t.parameters}
            out.append(types.Tool(name=t.name, description=t.description, inputSchema=schema,
                                  annotations=types.ToolAnnotations(readOnlyHint=t.kind == "read")))
        out += [
            types.Tool(name=RESET, description="Start the episode over from a fresh copy of the seed database; "
                       "with scenario_id, the scenario's intent and user facts are returned.", inputSchema=_SCENARIO_ARG),
            types.Tool(name=STATE_HASH, description="The canonical hash of the episode's database state.",
                       inputSchema={"type": "object", "properties": {}, "additionalProperties": False},
                       annotations=types.ToolAnnotations(readOnlyHint=True)),
            types.Tool(name=GOLD_DIFF, description="Score the episode against a scenario's gold state as the "
                       "verifier does: state hash vs gold hash, field diff final vs gold, and for a read-only "
                       "scenario whether the calls match the gold calls. Default: the scenario of the last reset.",
                       inputSchema=_SCENARIO_ARG, annotations=types.ToolAnnotations(readOnlyHint=True)),
            types.Tool(name=SCENARIOS, description="The domain's scenarios (id, split, read_only, intent, user facts).",
                       inputSchema={"type": "object", "properties": {}, "additionalProperties": False},
                       annotations=types.ToolAnnotations(readOnlyHint=True)),
        ]
        return out

    async def _list_tools(self) -> list[types.Tool]:
        return self.tools()

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        episode: Episode = self.server.request_context.lifespan_context
        size = len(json.dumps(arguments, ensure_ascii=False, default=str))
        if size > MAX_ARGUMENT_BYTES:
            return _result(ToolResult(False, None, f"arguments of {name} are too large: {size} bytes "
                                                   f"(at most {MAX_ARGUMENT_BYTES})"))
        async with episode.lock:  # one call at a time per session; other sessions are not held
            return await anyio.to_thread.run_sync(self.handle, episode, name, arguments)

    # the calls themselves (blocking: they run in a worker thread) --------------------------------
    def handle(self, episode: Episode, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name == RESET:
            return self._reset(episode, arguments)
        if name == STATE_HASH:
            return _result(ToolResult(True, {"state_hash": episode.environment().state_hash()}))
        if name == GOLD_DIFF:
            return self._gold_diff(episode, arguments)
        if name == SCENARIOS:
            return _result(ToolResult(True, [{"id": s.id, "split": s.split, "read_only": s.read_only,
                                              "intent": s.intent, "user_facts": s.user_facts}
                                             for s in self.scenarios.values()]))
        res = episode.environment().call(name, arguments)
        if res.ok:
            episode.calls.append((name, arguments))
        return _result(res)

    def _scenario(self, episode: Episode, arguments: dict[str, Any]) -> Scenario | ToolResult | None:
        sid = arguments.get("scenario_id")
        if sid is None:
            return episode.scenario
        if not isinstance(sid, str) or sid not in self.scenarios:
            return ToolResult(False, None, f"unknown scenario {sid!r} in domain {self.spec.id} "
                                           f"({len(self.scenarios)} scenarios; see {SCENARIOS})")
        return self.scenarios[sid]

    def _reset(self, episode: Episode, arguments: dict[str, Any]) -> types.CallToolResult:
        scenario = self._scenario(episode, arguments) if arguments.get("scenario_id") is not None else None
        if isinstance(scenario, ToolResult):
            return _result(scenario)
        obs = episode.environment().reset(scenario)
        episode.scenario, episode.calls = scenario, []
        obs.pop("tools", None)  # the client has them from tools/list
        return _result(ToolResult(True, obs))

    def _gold_diff(self, episode: Episode, arguments: dict[str, Any]) -> types.CallToolResult:
        scenario = self._scenario(episode, arguments)
        if isinstance(scenario, ToolResult):
            return _result(scenario)
        if scenario is None:
            return _result(ToolResult(False, None, f"no scenario: pass scenario_id or reset with one ({RESET})"))
        env = episode.environment()
        h = env.state_hash()
        state_ok = h == scenario.gold_hash
        calls_ok = (calls_match(episode.calls, [(c.name, c.arguments) for c in scenario.gold_calls], self.kinds)
                    if scenario.read_only else None)
        return _result(ToolResult(True, {
            "scenario_id": scenario.id, "state_hash": h, "gold_hash": scenario.gold_hash,
            "state_matches": state_ok, "calls_match": calls_ok, "passed": state_ok and calls_ok is not False,
            "diff": [] if state_ok else state_diff(env.diff(), scenario.gold_diff)}))

    # transports -----------------------------------------------------------------------------------
    def _options(self):
        return self.server.create_initialization_options(NotificationOptions())

    async def serve_stdio(self) -> None:
        """One session on stdin/stdout (the client started this process)."""
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self._options())

    def http_app(self) -> Starlette:
        """Streamable HTTP at /mcp, one episode per MCP session (Mcp-Session-Id); at most MAX_SESSIONS,
        each closed after SESSION_IDLE_S without a request."""
        manager = StreamableHTTPSessionManager(app=self.server, stateless=False, max_sessions=MAX_SESSIONS,
                                               session_idle_timeout=SESSION_IDLE_S)

        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            async with manager.run():
                yield

        return Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)

    def serve_http(self, port: int, host: str = "127.0.0.1") -> None:
        """Streamable HTTP on loopback (no authentication: never bind it to a public address)."""
        uvicorn.run(self.http_app(), host=host, port=port, log_level="warning")


def _result(res: ToolResult) -> types.CallToolResult:
    """The MCP result of one call: the text an agent sees (envs.episode.ToolResult.text), isError on failure."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=res.text())], isError=not res.ok)
