"""Many small domains built at once on the build flow's thread pool (issue 23).

A large build used to lose a few domains at random to "SystemError: AST constructor recursion
depth mismatch" (CPython 3.11's ast is not thread-safe; see agentscaler/pyast.py). This builds
ROUNDS x DOMAINS tiny domains (two tools each) in fresh workspaces with WORKERS threads, the real
sandbox and a real Prefect run, plus a few domains that fail on purpose (so that Prefect formats
their tracebacks, which parses Python, in worker threads while others parse generated code). Every
good domain must build; the broken ones must be named with their stage, exception type,
location and "domain" fault. tests/agentscaler/test_pyast.py provokes the race itself.
"""

from __future__ import annotations

import os

import pytest
from prefect.task_runners import ThreadPoolTaskRunner

from agentscaler.artifacts import save_tools
from agentscaler.catalog import Catalog
from agentscaler.models import Tool
from agentscaler.workspace import Workspace, atomic_write_json
from flows.build_environments import build_environments_flow

ROUNDS = int(os.environ.get("AGENTSCALER_TEST_BUILD_ROUNDS", "3"))
DOMAINS = int(os.environ.get("AGENTSCALER_TEST_BUILD_DOMAINS", "100"))
WORKERS = 16  # eight times the default: as many domains in flight as the machine can start workers for
BROKEN = 4


def _tool(name: str, props: dict, required: list[str]) -> Tool:
    return Tool(name=name, source_name=name, source="test", description=name.replace("_", " "),
                parameters={"type": "object", "properties": props, "required": required}).with_id()


def _workspace(root, n: int) -> tuple[Workspace, set[str]]:
    """n tiny domains (a read and a write on one table) and BROKEN domains whose tools are missing."""
    tools, records = [], []
    for i in range(n):
        read = _tool(f"get_item_{i}", {"item_id": {"type": "string"}}, ["item_id"])
        write = _tool(f"update_item_{i}", {"item_id": {"type": "string"}, "note": {"type": "string"}},
                      ["item_id", "note"])
        tools += [read, write]
        records.append({"domain": f"dtiny{i:07d}", "tools": [read.id, write.id], "names": [read.name, write.name],
                        "edges": [{"src": read.name, "dst": write.name, "kind": "dataflow", "weight": 1.0}]})
    broken = {f"dbroken{i:06d}" for i in range(BROKEN)}
    records += [{"domain": d, "tools": ["not-in-corpus"], "names": ["no_such_tool"], "edges": []} for d in sorted(broken)]
    ws = Workspace(root)
    ws.tools_path.parent.mkdir(parents=True, exist_ok=True)
    save_tools(ws.tools_path, tools)
    ws.domains_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ws.domains_path, records)
    return ws, broken


@pytest.mark.slow
def test_hundreds_of_domains_at_once_lose_none(tmp_path, prefect_harness):
    build = build_environments_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=WORKERS))
    for r in range(ROUNDS):
        ws, broken = _workspace(tmp_path / f"round{r}", DOMAINS)
        summary = build(str(ws.root), per_domain=1, max_length=2, processes=0)  # the thread pool (the race)
        assert set(summary["failed"]) == broken, {d: f for d, f in summary["failures"].items() if d not in broken}
        assert summary["built"] == DOMAINS and summary["scenarios"] >= DOMAINS
        for d in broken:
            f = summary["failures"][d]
            assert (f["stage"], f["type"], f["kind"]) == ("synthesize", "SynthesisError", "domain"), f
            assert f["where"].startswith("tasks/environments/synthesize.py:"), f
        assert summary["failed_by_kind"] == {"domain": BROKEN}
        done = Catalog(ws.catalog_path).domain_summary()["counts"]
        assert done == {"done": DOMAINS, "failed": BROKEN}, done
