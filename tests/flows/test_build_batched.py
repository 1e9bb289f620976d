"""The batched build (batches of domains on a pool of processes) makes exactly what the one-task-
per-domain build makes: the same domains, environment files, specs (timings aside) and scenarios,
and the same failures. Real sandbox, real Prefect run, real processes."""

from __future__ import annotations

import json
import os
import sqlite3

from agentscaler.artifacts import save_tools
from agentscaler.catalog import Catalog
from agentscaler.models import Tool
from agentscaler.workspace import Workspace, atomic_write_json
from flows.build_environments import build_environments_flow

TIMINGS = ("generate_s", "validate_s")  # wall-clock figures in spec.json's report: the only allowed difference


def _tool(name: str, props: dict, required: list[str]) -> Tool:
    return Tool(name=name, source_name=name, source="test", description=name.replace("_", " "),
                parameters={"type": "object", "properties": props, "required": required}).with_id()


def _workspace(root, n: int = 3) -> Workspace:
    """n small shop domains (search, read, write on one entity) and one whose tools are missing."""
    tools, records = [], []
    for i in range(n):
        ent = ["order", "ticket", "parcel", "booking", "invoice"][i % 5]
        search = _tool(f"search_{ent}s_{i}", {"status": {"type": "string", "enum": ["open", "closed"]}}, [])
        read = _tool(f"get_{ent}_{i}", {f"{ent}_id": {"type": "string"}}, [f"{ent}_id"])
        write = _tool(f"cancel_{ent}_{i}", {f"{ent}_id": {"type": "string"}, "reason": {"type": "string"}},
                      [f"{ent}_id"])
        tools += [search, read, write]
        records.append({"domain": f"dshop{i:08d}", "tools": [t.id for t in (search, read, write)],
                        "names": [t.name for t in (search, read, write)],
                        "edges": [{"src": search.name, "dst": read.name, "kind": "dataflow", "weight": 1.0},
                                  {"src": read.name, "dst": write.name, "kind": "dataflow", "weight": 1.0}]})
    records.append({"domain": "dbroken000000", "tools": ["not-in-corpus"], "names": ["no_such_tool"], "edges": []})
    ws = Workspace(root)
    ws.tools_path.parent.mkdir(parents=True, exist_ok=True)
    save_tools(ws.tools_path, tools)
    ws.domains_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ws.domains_path, records)
    return ws


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMINGS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _artifacts(ws: Workspace) -> dict[str, dict[str, object]]:
    out = {}
    for d in ws.domain_ids():
        folder = ws.domain_dir(d)
        with sqlite3.connect(f"file:{folder / 'seed.sqlite'}?mode=ro", uri=True) as db:
            seed = list(db.iterdump())  # the rows, not SQLite's page bookkeeping
        out[d] = {"spec": _strip(json.loads((folder / "spec.json").read_text())), "seed": seed,
                  **{name: (folder / name).read_bytes() for name in ("models.py", "tools.py", "scenarios.jsonl")}}
    return out


def test_batched_build_makes_what_the_per_domain_build_makes(tmp_path, prefect_harness):
    one = _workspace(tmp_path / "one")
    pooled = _workspace(tmp_path / "pooled")
    a = build_environments_flow(str(one.root), per_domain=3, processes=0)
    b = build_environments_flow(str(pooled.root), per_domain=3, processes=2)
    assert a["built"] == b["built"] == 3 and a["scenarios"] == b["scenarios"] > 0
    assert set(a["failures"]) == set(b["failures"]) == {"dbroken000000"}
    fa, fb = a["failures"]["dbroken000000"], b["failures"]["dbroken000000"]
    assert {k: fa[k] for k in ("stage", "type", "where", "kind")} == {k: fb[k] for k in ("stage", "type", "where", "kind")}
    assert fb["kind"] == "domain" and fb["stage"] == "synthesize"
    assert _artifacts(one) == _artifacts(pooled)
    assert a["unchanged"] == b["unchanged"] == 0
    again = build_environments_flow(str(pooled.root), per_domain=3, processes=2)  # nothing changed: nothing rebuilt
    assert (again["built"], again["unchanged"]) == (3, 3) and _artifacts(one) == _artifacts(pooled)
    for ws in (one, pooled):  # every domain's stages recorded in its workspace's catalog
        assert Catalog(ws.catalog_path).domain_summary()["counts"] == {"done": 3, "failed": 1}


def test_one_worker_per_domain_builds_what_two_workers_build(tmp_path, monkeypatch):
    """build_one builds a domain's scenarios on the sandbox worker its validation started (on the
    staging folder, before the files moved into place): one worker start per domain, not two, and
    the same environment files, spec and scenarios as validation and scenarios on workers of
    their own. Real sandbox."""
    from agentscaler.artifacts import load_tools
    from envs.sandbox import WorkerProcess
    from flows.build_worker import build_one
    from tasks.environments.synthesize import domain_tools, load_domain_records, synthesize_domain
    from tasks.scenarios.build import build_scenarios

    starts = []
    real_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: starts.append(self.domain_dir) or real_start(self))
    shared, own = _workspace(tmp_path / "shared", n=2), _workspace(tmp_path / "own", n=2)
    tools = load_tools(shared.tools_path)
    records = load_domain_records(shared)[:2]
    kept = [build_one(shared, r, domain_tools(r, tools), "rules", 0, 4, 4)["scenarios"] for r in records]
    assert len(starts) == 2 and all(k > 0 for k in kept)
    for r in records:
        synthesize_domain(own, r, domain_tools(r, tools))
        build_scenarios(own, r["domain"], per_domain=4, max_length=4, seed=0)
    assert len(starts) == 6
    assert _artifacts(shared) == _artifacts(own)


def _die(*_args):
    """A pool process that dies mid-build (the OOM killer, a crash in C): runs in the spawned process."""
    os._exit(3)


def test_a_batch_whose_process_died_fails_its_unfinished_domains(tmp_path, prefect_harness, monkeypatch):
    """Batches are queued on the pool before their task runs start; when the pool's processes die,
    every domain not yet built fails as infrastructure's fault (recorded failed, never left running:
    retry-failed finds it) and a domain built before counts as built. Real Prefect run, real processes."""
    import flows.build_environments as be

    ws = _workspace(tmp_path / "ws")
    first = build_environments_flow(str(ws.root), per_domain=3, processes=0, domains=["dshop00000000"])
    assert first["built"] == 1
    monkeypatch.setattr(be, "build_batch", _die)
    out = build_environments_flow(str(ws.root), per_domain=3, processes=2)
    assert out["built"] == 1 and set(out["failures"]) == {"dshop00000001", "dshop00000002", "dbroken000000"}
    assert {f["kind"] for f in out["failures"].values()} == {"infrastructure"}
    assert all("BrokenProcessPool" in f["type"] or "BrokenProcessPool" in f["message"] for f in out["failures"].values())
    catalog = Catalog(ws.catalog_path)
    assert catalog.domain_summary()["counts"] == {"done": 1, "failed": 3}
    assert {catalog.stage_status(d, "synthesize")["status"] for d in out["failures"]} == {"failed"}
