"""Core: atomic writes, content hashes, the catalog, the Tool model, the tool store."""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from agentscaler.artifacts import load_tools, save_tools
from agentscaler.catalog import Catalog
from agentscaler.hashing import content_hash
from agentscaler.models import Tool
import agentscaler.workspace as workspace
from agentscaler.workspace import (Workspace, atomic_write_bytes, atomic_write_json, atomic_write_text, json_bytes,
                                  read_jsonl)
from tests.agentscaler.catalog_writers import mark_many, open_catalog


def test_content_hash_is_key_order_independent():
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})


def test_atomic_write_leaves_no_temp_files(tmp_path: Path):
    p = tmp_path / "x" / "a.json"
    atomic_write_json(p, {"k": 1})
    atomic_write_text(p, "replaced")
    assert p.read_text() == "replaced"
    assert [f.name for f in p.parent.iterdir()] == ["a.json"]


def test_chunks_are_written_whole_in_order_also_after_a_short_write(tmp_path: Path, monkeypatch):
    """atomic_write_bytes of chunks (writev, IOV_MAX at a time): every byte once, in order, with
    empty chunks and slices among them, and when the kernel takes only part of a writev."""
    chunks = [bytes([65 + i % 26]) * (i % 50) for i in range(2500)] + [memoryview(b"xyz")[1:], b""]
    want = b"".join(bytes(c) for c in chunks)
    atomic_write_bytes(tmp_path / "whole", iter(chunks))
    assert (tmp_path / "whole").read_bytes() == want
    writev, calls = workspace.os.writev, []

    def short(fd, bufs):  # every other call takes a third of what it is given, cut mid-chunk
        calls.append(len(bufs))
        if len(calls) % 2:
            return workspace.os.write(fd, b"".join(bytes(b) for b in bufs)[:sum(len(b) for b in bufs) // 3])
        return writev(fd, bufs)

    monkeypatch.setattr(workspace.os, "writev", short)
    atomic_write_bytes(tmp_path / "short", iter(chunks))
    assert (tmp_path / "short").read_bytes() == want and len(calls) > 4


def test_a_staged_write_is_in_place_only_when_finished(tmp_path: Path, monkeypatch):
    """atomic_write_start writes a temporary file beside the destination; finish() puts it in
    place (what atomic_write_bytes does in one step); abandon(), or an fsync that fails, leaves the
    destination as it was and no temporary file."""
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"old\n")
    staged = workspace.atomic_write_start(p, [b"new", memoryview(b" lines\n")])
    assert p.read_bytes() == b"old\n" and len(list(tmp_path.iterdir())) == 2
    assert staged.finish() == p and p.read_bytes() == b"new lines\n"
    assert [f.name for f in tmp_path.iterdir()] == ["t.jsonl"]
    workspace.atomic_write_start(p, b"dropped").abandon()
    assert p.read_bytes() == b"new lines\n" and [f.name for f in tmp_path.iterdir()] == ["t.jsonl"]

    def failing(fd):
        raise OSError(5, "Input/output error")

    staged = workspace.atomic_write_start(p, b"never")
    monkeypatch.setattr(workspace.os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output"):
        staged.finish()
    assert p.read_bytes() == b"new lines\n" and [f.name for f in tmp_path.iterdir()] == ["t.jsonl"]


def test_json_artifacts_read_back_as_json_wrote_them():
    """orjson writes the artifacts; a reader sees what json.dumps(indent=2, sort_keys=True, default=str) gave."""
    obj = {"b": [1, 2.5, {"z": None, "a": "é"}], "a": datetime.datetime(2026, 1, 1), "p": Path("/x"),
           "n": np.float64(0.25), "t": (1, 2)}
    out = json_bytes(obj)
    assert out.endswith(b"\n") and out.index(b'"a"') < out.index(b'"b"') and "é".encode() in out
    assert json.loads(out) == json.loads(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str))
    assert json.loads(json_bytes({"big": 2 ** 70})) == {"big": 2 ** 70}  # over 64 bits: json writes it


def test_read_jsonl_skips_torn_last_line(tmp_path: Path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    assert read_jsonl(p) == [{"a": 1}, {"a": 2}]


def test_workspace_layout(tmp_path: Path):
    ws = Workspace(tmp_path / "ws")
    for sub in ("corpus", "graph", "domains", "rollouts", "sft", "models", "reports"):
        assert (ws.root / sub).is_dir()
    assert ws.domain_ids() == []
    (ws.domain_dir("d1")).mkdir()
    (ws.domain_dir("d1") / "spec.json").write_text("{}")
    assert ws.domain_ids() == ["d1"]


def test_catalog_marks_attempts_and_summary(tmp_path: Path):
    cat = Catalog(tmp_path / "catalog.sqlite")
    cat.mark("d1", "synthesize", "running")
    cat.mark("d1", "synthesize", "failed", error="SyntaxError in tools.py line 3")
    cat.mark("d1", "synthesize", "running")
    cat.mark("d2", "synthesize", "running")
    cat.mark("d2", "synthesize", "done", artifact="abc")
    summary = cat.domain_summary()
    by = {d["domain"]: d for d in summary["domains"]}
    assert by["d1"]["status"] == "running" and by["d1"]["attempts"] == 2
    assert by["d2"]["status"] == "done"
    cat.mark("d1", "synthesize", "failed", error="boom")
    assert cat.domain_summary()["counts"] == {"failed": 1, "done": 1}
    assert [r["domain"] for r in cat.domains(status="failed")] == ["d1"]
    with pytest.raises(ValueError):
        cat.mark("d1", "synthesize", "weird")


def test_catalog_mark_many_is_mark_for_each_domain(tmp_path: Path):
    """mark_many (one transaction) leaves the rows that one mark() per domain leaves: new and
    existing rows, attempts counted, artifacts by position, a domain named twice marked twice."""
    one, many = Catalog(tmp_path / "one.sqlite"), Catalog(tmp_path / "many.sqlite")
    for cat in (one, many):
        cat.mark("d1", "discover", "running")
        cat.mark("d1", "discover", "failed", error="boom")
    doms, arts = ["d1", "d2", "d3", "d2"], ["a1", None, "a3", "a2"]
    for d, a in zip(doms, arts):
        one.mark(d, "discover", "running", artifact=a)
    many.mark_many(doms, "discover", "running", artifacts=arts)
    one.mark("d3", "discover", "done")
    many.mark_many(["d3"], "discover", "done")
    strip = lambda cat: [{k: v for k, v in r.items() if k != "updated_at"} for r in cat.domains()]  # noqa: E731
    assert strip(many) == strip(one)
    assert many.stage_status("d2", "discover") == {**many.stage_status("d2", "discover"), "attempts": 2,
                                                   "artifact": "a2", "status": "running"}
    assert many.stage_status("d1", "discover")["error"] == "boom"  # running keeps the last error, as mark does
    with pytest.raises(ValueError):
        many.mark_many(["d1"], "discover", "weird")
    with pytest.raises(ValueError):
        many.mark_many(["d1", "d2"], "discover", "done", artifacts=["only one"])


def test_catalog_records_the_worker_and_opens_an_older_file(tmp_path: Path, monkeypatch):
    """A catalog written before the worker column gets it; each mark records host:pid, prefixed
    with the Prefect worker's name when a worker started the process."""
    import os
    import socket
    import sqlite3

    path = tmp_path / "catalog.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE domain_stages (domain VARCHAR, stage VARCHAR, status VARCHAR, attempts INTEGER, "
                     "last_error TEXT, artifact VARCHAR, updated_at DATETIME, PRIMARY KEY (domain, stage))")
        conn.execute("INSERT INTO domain_stages VALUES ('old', 'synthesize', 'done', 1, NULL, NULL, '2026-01-01')")
    cat = Catalog(path)
    assert cat.domain_summary()["domains"][0]["worker"] is None
    monkeypatch.setenv("PREFECT__WORKER_NAME", "w7")
    cat.mark("old", "scenarios", "done")
    assert cat.domain_summary()["domains"][0]["worker"] == f"w7@{socket.gethostname()}:{os.getpid()}"
    monkeypatch.delenv("PREFECT__WORKER_NAME")
    cat.mark("new", "synthesize", "running")
    assert cat.stage_status("new", "synthesize")["worker"] == f"{socket.gethostname()}:{os.getpid()}"


def test_catalog_survives_concurrent_writers(tmp_path: Path):
    path = str(tmp_path / "catalog.sqlite")
    Catalog(Path(path))
    procs = [mp.get_context("spawn").Process(target=mark_many, args=(path, w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert Catalog(Path(path)).domain_summary()["counts"] == {"done": 90}


def test_run_records(tmp_path: Path):
    cat = Catalog(tmp_path / "c.sqlite")
    cat.start_run("r1", "ingest", {"sources": ["a"]})
    cat.set_counts("r1", "ingest", {"accepted": 3, "rejected": 1})
    cat.finish_run("r1", "completed", {"accepted": 3})
    assert cat.runs()[0]["status"] == "completed"
    assert cat.counts("r1") == {"ingest": {"accepted": 3, "rejected": 1}}


def _tool(name: str = "get_user", **kw) -> Tool:
    return Tool(name=name, source_name=name, source="openai", description="Get a user by id.",
                parameters={"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
                **kw).with_id()


def test_tool_name_must_be_function_safe():
    with pytest.raises(ValidationError):
        _tool("get user!")
    with pytest.raises(ValidationError):
        Tool(name="x", source_name="x", source="s", description="d", parameters={}, bogus=1)


def test_tool_id_is_spec_hash_not_source():
    a = _tool()
    b = _tool().model_copy(update={"source": "bfcl"})
    assert a.id == b.spec_hash()
    assert a.openai_schema()["function"]["name"] == "get_user"


def test_toolstore_roundtrip(tmp_path: Path):
    tools = [_tool(), _tool("get_order", returns={"type": "object"}, category="shop", kind="read")]
    save_tools(tmp_path / "tools.parquet", tools)
    assert load_tools(tmp_path / "tools.parquet") == tools


def test_new_catalog_opened_by_many_processes_at_once(tmp_path: Path):
    """Creating the tables is serialized: no 'table already exists' when runs start together."""
    path = str(tmp_path / "fresh" / "catalog.sqlite")
    procs = [mp.get_context("spawn").Process(target=open_catalog, args=(path,)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert Catalog(Path(path)).stage_status("d", "synthesize")["attempts"] == 4


def test_a_failure_says_stage_type_location_and_whose_fault():
    """Issue 23: a failed domain's summary tells an infrastructure failure from a bad domain."""
    from agentscaler.errors import DeterministicError, error_text, failure, tag_stage

    def bad_domain():
        raise DeterministicError("domain dx: no tool executes")

    def interpreter():
        import json

        json.loads("{")  # raised inside the standard library, called from here

    for fn, kind in ((bad_domain, "domain"), (interpreter, "infrastructure")):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            tag_stage(exc, "synthesize")
            tag_stage(exc, "orchestration")  # the innermost stage wins
            f, text = failure(exc), error_text(exc)
        assert f["stage"] == "synthesize" and f["kind"] == kind
        assert f["our_code"].startswith("tests/agentscaler/test_core.py:")
        if kind == "domain":
            assert f["where"] == f["our_code"] and f["type"] == "DeterministicError"
        else:
            assert f["where"].startswith("python3.11/json/") and f["type"] == "JSONDecodeError"
            assert f"(at {f['where']}, from {f['our_code']})" in text
