"""`agentscaler export-env`: the standalone folder opens with Environment.open and gives the same
state hashes and tool results as the original, its runner passes, and the tau2 verticals export
and serve over MCP (the SDK's stdio client) like any synthesized domain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from agentscaler.artifacts import domain_scenarios
from agentscaler.models import Scenario
from agentscaler.workspace import Workspace
from envs.episode import Environment
from envs.tau2.build import build_tau2_domain
from envs.tau2.tasks import tau2_scenarios
from tasks.scenarios.build import build_scenarios
from tasks.serve.export import DomainNotFound, export_env
from tests.conftest import load_shop_builder

AGENTSCALER = str(Path(sys.executable).parent / "agentscaler")
FILES = ["README.md", "models.py", "run.py", "scenarios.jsonl", "seed.sqlite", "spec.json", "tools.py"]


def _episodes(domain_dir: Path, scenarios: list[Scenario]) -> list[tuple[str, list[str], str]]:
    """Per scenario: the seed hash, the text of each gold call's result, the final hash."""
    out = []
    with Environment.open(domain_dir) as env:
        for s in scenarios:
            env.reset()
            start = env.state_hash()
            texts = [env.call(c.name, c.arguments).text() for c in s.gold_calls]
            out.append((start, texts, env.state_hash()))
    return out


def test_export_reopens_with_the_same_states_and_results(tmp_path: Path):
    ws = Workspace(tmp_path / "ws")
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=6, seed=2)
    out = tmp_path / "shop-env"
    got = subprocess.run([AGENTSCALER, "export-env", "shop", "--out", str(out), "--json", "-w", str(ws.root)],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    listed = json.loads(got.stdout)["files"]
    assert listed == sorted([*FILES, "scenarios.meta.json"]) == sorted(p.name for p in out.iterdir())
    scenarios = domain_scenarios(ws.domain_dir("shop"))
    assert scenarios and domain_scenarios(out) == scenarios
    original, exported = _episodes(ws.domain_dir("shop"), scenarios), _episodes(out, scenarios)
    assert exported == original
    assert all(final == s.gold_hash for (_, _, final), s in zip(exported, scenarios))
    assert "update_email" in (out / "README.md").read_text()

    ran = subprocess.run([sys.executable, "run.py"], cwd=out, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{len(scenarios)}/{len(scenarios)} scenarios reach their gold state" in ran.stdout

    again = subprocess.run([AGENTSCALER, "export-env", "shop", "--out", str(out), "-w", str(ws.root)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "not an empty folder" in again.stderr
    with pytest.raises(DomainNotFound, match="no finished environment named 'nope'"):
        export_env(ws, "nope", tmp_path / "x")


@pytest.mark.parametrize("name", ["airline", "retail"])
def test_tau2_vertical_exports_and_serves_over_mcp(tmp_path: Path, name: str):
    ws = Workspace(tmp_path / "ws")
    build_tau2_domain(name, ws.domain_dir(f"tau2_{name}"))
    tau2_scenarios(name, ws.domain_dir(f"tau2_{name}"), limit=4)
    out = tmp_path / f"tau2_{name}-env"
    res = export_env(ws, f"tau2_{name}", out)
    assert res["files"] == FILES
    scenarios = domain_scenarios(out)
    write = next(s for s in scenarios if not s.read_only)
    assert _episodes(out, scenarios) == _episodes(ws.domain_dir(f"tau2_{name}"), scenarios)

    async def body() -> tuple[int, dict]:
        params = StdioServerParameters(command=AGENTSCALER, args=["serve", str(out), "--mcp"], env={**os.environ})
        async with stdio_client(params) as (read, write_stream):
            async with ClientSession(read, write_stream) as s:
                await s.initialize()
                n_tools = len((await s.list_tools()).tools)
                await s.call_tool("episode-reset", {"scenario_id": write.id})
                for c in write.gold_calls:
                    r = await s.call_tool(c.name, c.arguments)
                    assert not r.isError, r.content[0].text
                return n_tools, json.loads((await s.call_tool("episode-gold-diff", {})).content[0].text)

    n_tools, scored = anyio.run(body)
    assert n_tools == res["tools"] + 4
    assert scored["passed"] is True and scored["state_hash"] == write.gold_hash != write.seed_hash
