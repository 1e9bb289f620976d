"""Hostile generated code: the sandbox attack suite against LLM-synthesized domains.

The "model" is scripted (tests/fault/hostile.py: ScriptedModel replies with hostile tools.py): these
tests are about our synthesizer's static check, the sandboxed validation and the catalog, not a
model. Nothing generated is imported or run in this process. benchmarks/bench_faults.py runs every
attack of tests/envs/test_sandbox_attacks.py this way; here a bounded subset.
"""

from __future__ import annotations

import os
import shutil

import pytest

from agentscaler.workspace import Workspace
from envs.sandbox import bwrap_works, unsafe_from_env
from tests.fault.hostile import CASES, ScriptedModel, _write_attacks, canaries, synthesize_hostile
from tests.tasks.environments.test_llm import GOOD_CODE, RECORD, ROWS, TABLES, TOOLS

pytestmark = pytest.mark.skipif(unsafe_from_env() or not bwrap_works(),
                                reason="bubblewrap cannot create namespaces here: hostile code needs every layer")

# attacks that pass the static check reach the sandbox; the others are stopped before it
# (read_tool_writes is harmless: a read tool's transaction is rolled back, so that domain may pass)
SANDBOX = ["sql_attach", "recursion", "huge_output", "memory"]
PARENT = os.getppid()  # a kill_parent attack that escaped would re-parent this process
STATIC = ["read_passwd", "subprocess", "fork_bomb", "write_host", "kill_parent", "forge_reply"]


@pytest.mark.parametrize("attack", SANDBOX + STATIC)
def test_hostile_llm_code_fails_the_domain_and_never_escapes(tmp_path, attack):
    ws = Workspace(tmp_path / "ws")
    before = canaries(tmp_path / "canary")
    res = synthesize_hostile(ws, attack, tmp_path / "canary")
    assert res["failed"], res  # never accepted as a finished environment
    assert res["layer"] == ("sandbox" if attack in SANDBOX else "static"), res
    assert res["catalog"] == "failed" and res["catalog_error"], res  # failed, with the reason
    assert not res["spec"] and ws.domain_ids() == []
    assert canaries(tmp_path / "canary") == before  # host files untouched
    assert os.getppid() == PARENT  # this process (and its parent) still alive


def test_hostile_llm_code_falls_back_to_rules(tmp_path):
    from tasks.environments.synthesize import synthesize_domain
    from tests.fault.hostile import hostile_code

    ws = Workspace(tmp_path / "ws")
    model = ScriptedModel([TABLES, hostile_code("sql_drop", tmp_path), ROWS])
    spec = synthesize_domain(ws, RECORD, TOOLS, synth="llm", synth_options={"client": model, "config": {"max_rounds": 1}})
    assert spec.synthesizer == "rules" and spec.report["fallback"] == "rules"
    assert "not authorized" in spec.report["fallback_reason"] or "DROP" in spec.report["fallback_reason"].upper()
    assert "DROP TABLE" not in (ws.domain_dir(RECORD["domain"]) / "tools.py").read_text()


@pytest.fixture(scope="module")
def llm_env(tmp_path_factory):
    """An environment built by the LLM synthesizer (scripted good replies), then given the attack tools."""
    from envs.episode import Environment
    from tasks.environments.synthesize import synthesize_domain

    root = tmp_path_factory.mktemp("llmws")
    ws = Workspace(root / "ws")
    spec = synthesize_domain(ws, RECORD, TOOLS, synth="llm",
                             synth_options={"client": ScriptedModel([TABLES, GOOD_CODE, ROWS]), "config": {"max_rounds": 1}})
    assert spec.synthesizer == "llm"
    dest = root / "attacked" / spec.id
    shutil.copytree(ws.domain_dir(spec.id), dest)
    _write_attacks(dest)
    env = Environment.open(dest, time_limit=1.0, memory_mb=512)
    env.reset()
    yield env
    env.close()


FAST_CASES = [c for c in CASES if c[0] in {"fork_bomb", "read_passwd", "read_workspace", "write_tools", "write_host",
                                           "socket", "subprocess", "ctypes_segfault", "kill_parent", "kill_all",
                                           "hard_exit", "sql_attach", "sql_drop", "forge_reply", "memory"}]


@pytest.mark.parametrize("attack,fragment,restarts", FAST_CASES, ids=[c[0] for c in FAST_CASES])
def test_attack_suite_on_llm_synthesized_domain(llm_env, attack, fragment, restarts):
    before = llm_env.restarts
    res = llm_env.call(f"attack_{attack}", {})
    assert not res.ok, f"attack {attack} was not stopped: {str(res.content)[:200]}"
    assert any(f in res.error for f in fragment.split("|")), res.error
    if restarts is not None:
        assert (llm_env.restarts > before) == restarts, res.error
    ok = llm_env.call("get_user", {"user_id": "u1"})
    assert ok.ok and ok.content["name"] == "Ada", ok.error
