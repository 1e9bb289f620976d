"""The synthesize stage end to end: files on disk, validation through the real sandboxed
Environment (generated code never runs in the test process), catalog status, skip on re-run,
failures reported, and the CLI (`synthesize`, `show domain --json`)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tokenize

import pytest
from typer.testing import CliRunner

from agentscaler.artifacts import save_tools
from agentscaler.catalog import Catalog
from agentscaler.models import Tool
from agentscaler.workspace import Workspace, atomic_write_json
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec
from tasks.environments.synthesis import SynthesisError
from tasks.environments.synthesize import synthesize_domain
from tasks.environments.validate import validate_environment

UNSAFE = unsafe_from_env()


def T(name: str, props: dict | None = None, req: list[str] | None = None, desc: str = "", kind=None) -> Tool:
    return Tool(name=name, source_name=name, source="test", description=desc or name.replace("_", " "),
                parameters={"type": "object", "properties": props or {}, "required": req or []}, kind=kind).with_id()


# BFCL-like, ToolBench-like and tau2-like tools with odd parameter types
TOOLS = [
    T("get_user_details", {"user_id": {"type": "string"}}, ["user_id"], kind="read"),
    T("list_user_orders", {"user_id": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 9}},
      ["user_id"]),
    T("search_products", {"query": {"type": "string"}, "max_price": {"type": "number", "minimum": 0},
                          "category": {"type": "string", "enum": ["books", "toys", "food"]}}, ["query"]),
    T("place_order", {"user_id": {"type": "string"}, "product_id": {"type": "string"},
                      "quantity": {"type": "integer", "minimum": 1, "maximum": 5},
                      "gift": {"type": "object", "properties": {"wrap": {"type": "boolean"}, "note": {"type": "string"}}},
                      "coupons": {"type": "array", "items": {"type": "string"}}}, ["user_id", "product_id"]),
    T("cancel_order", {"order_id": {"type": "string"}, "reason": {"type": "string"}}, ["order_id"]),
    T("update_email", {"user_id": {"type": "string"}, "email": {"type": "string", "format": "email"}},
      ["user_id", "email"]),
    T("delete-product", {"productId": {"type": "integer"}}, ["productId"]),
    T("calculate_triangle_area", {"base": {"type": "integer"}, "height": {"type": "integer"},
                                  "unit": {"type": "string"}}, ["base", "height"]),
    T("get_time"),
    T("Weather_forecast", {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
                           "lang": {"type": "string", "enum": ["en", "fr"]}}, ["city"],
      desc="GET the weather forecast for a city (RapidAPI)"),
    T("set_thermostat", {"temperature": {"type": "number", "minimum": 10, "maximum": 30},
                         "unit": {"type": "string", "enum": ["C", "F"]}}, ["temperature"]),
    T("tagOrder", {"orderId": {"type": "string"}, "class": {"type": "string"}}, ["orderId", "class"]),
]
RECORD = {"domain": "dshop0001", "tools": [t.id for t in TOOLS], "names": [t.name for t in TOOLS],
          "edges": [{"src": "search_products", "dst": "place_order", "kind": "similar", "weight": 0.8}]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    ws = Workspace(tmp_path_factory.mktemp("ws"))
    spec = synthesize_domain(ws, RECORD, TOOLS, unsafe=UNSAFE)
    return ws, spec


def test_files_and_quality_bar(built):
    ws, spec = built
    d = ws.domain_dir("dshop0001")
    for name in ("models.py", "tools.py", "seed.sqlite", "spec.json"):
        assert (d / name).exists(), name
    assert os.stat(d / "spec.json").st_mtime_ns >= max(os.stat(d / n).st_mtime_ns for n in ("models.py", "tools.py"))
    assert ws.domain_ids() == ["dshop0001"]
    assert not list((ws.cache_dir / "synth").glob("*"))  # staging cleaned up
    r = spec.report
    v = r["validation"]
    assert r["execute_rate"] >= 0.95, v["failures"]
    assert v["reads_mutating"] == 0
    assert v["writes_change_state"] == r["writes"] >= 5
    for name, t in v["tools"].items():
        assert t["signature_ok"], name
        assert t["executes"], (name, t["errors"])
        assert t["read_mutated"] is False
    observers = r["observers"]["synthesized"]  # reads synthesis added, not from the corpus
    assert r["reads"] + r["writes"] == len(TOOLS) + len(observers)
    assert {t.name for t in spec.tools if t.origin == "synthesized"} == set(observers)
    assert sum(r["seed_rows"].values()) >= 20
    assert Catalog(ws.catalog_path).stage_status("dshop0001", "synthesize")["status"] == "done"
    assert DomainSpec.load(d) == spec


def test_rerun_skips_identical_environment(built):
    ws, spec = built
    d = ws.domain_dir("dshop0001")
    before = {n: os.stat(d / n).st_mtime_ns for n in ("spec.json", "tools.py", "seed.sqlite")}
    again = synthesize_domain(ws, RECORD, TOOLS, unsafe=UNSAFE)
    assert again == spec
    assert before == {n: os.stat(d / n).st_mtime_ns for n in ("spec.json", "tools.py", "seed.sqlite")}


def test_validation_catches_broken_code(built, tmp_path):
    """Hand-broken copies of the generated environment: each defect is reported with its reason."""
    ws, spec = built
    d = tmp_path / "broken"
    shutil.copytree(ws.domain_dir("dshop0001"), d)
    os.chmod(d / "tools.py", 0o644)
    code = (d / "tools.py").read_text()
    code = code.replace("def get_time(db)", "def get_time(db, extra)")  # signature mismatch
    code = code.replace("    db.update('users', {'user_id': row['user_id']}, values)\n", "")  # write that writes nothing
    code = code.replace("def search_products(db, query: str,", "def search_products(db, query: str, *, _x=1/0,")  # crashes
    (d / "tools.py").write_text(code)
    v = validate_environment(d, unsafe=UNSAFE)
    tools = v["tools"]
    assert v["failures"].get("load") or v["failures"].get("tool_error")  # module fails at import (1/0)
    (d / "tools.py").write_text(code.replace("*, _x=1/0,", ""))
    v = validate_environment(d, unsafe=UNSAFE)
    tools = v["tools"]
    assert tools["get_time"]["reason"] == "signature"
    assert tools["update_email"]["reason"] == "no_state_change"
    assert tools["update_email"]["executes"] and not tools["update_email"]["changes_state"]
    assert tools["search_products"]["executes"]
    (d / "tools.py").write_text("def broken(:\n")
    v = validate_environment(d, unsafe=UNSAFE)
    assert v["executes"] == 0 and v["failures"] == {"syntax": len(spec.tools)}  # the observers too


def test_failures_marked_and_reported(tmp_path):
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(SynthesisError, match="none of its tools"):
        synthesize_domain(ws, {"domain": "dmissing", "tools": ["nope"]}, TOOLS, unsafe=UNSAFE)
    st = Catalog(ws.catalog_path).stage_status("dmissing", "synthesize")
    assert st["status"] == "failed" and "none of its tools" in st["error"]
    with pytest.raises(SynthesisError, match="valid 'domain' id"):
        synthesize_domain(ws, {"domain": "../x"}, TOOLS)
    assert ws.domain_ids() == []


def test_cli_synthesize_and_show_domain(tmp_path):
    from flows.cli import app

    ws = Workspace(tmp_path / "ws")
    small = TOOLS[:6]
    save_tools(ws.tools_path, small)
    atomic_write_json(ws.domains_path, [
        {"domain": "dsmall01", "tools": [t.id for t in small], "names": [t.name for t in small], "edges": []},
        {"domain": "dempty01", "tools": ["missing"], "names": [], "edges": []}])
    runner = CliRunner()
    env = {"AGENTSCALER_UNSAFE_SANDBOX": "1" if UNSAFE else ""}
    res = runner.invoke(app, ["-w", str(ws.root), "synthesize", "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["counts"] == {"done": 1, "failed": 1}
    assert out["execute_rate"] >= 0.95 and out["reads_mutating"] == 0
    res = runner.invoke(app, ["-w", str(ws.root), "show", "domain", "dsmall01", "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert {t["name"]: t["kind"] for t in shown["tools"]}["cancel_order"] == "write"
    assert all(set(t) >= {"name", "kind", "executes"} for t in shown["tools"])
    assert {t["name"] for t in shown["tables"]} >= {"users", "orders", "products"}
    assert runner.invoke(app, ["-w", str(ws.root), "show", "domain", "nope", "--json"]).exit_code == 1


def test_parameter_names_that_are_not_ascii_identifiers_reach_the_tool(tmp_path):
    """Issue 22 class 8: Python folds identifiers (NFKC), so a parameter `ｄｂ` *is* `db` in code:
    tools.py failed to compile (duplicate argument) and every tool of the domain broke; `ｒｏｗ`
    became the template's local `row` (the tool put the row inside itself). Generated code uses ASCII
    identifiers only; such parameters reach the tool through **params (run in the sandbox)."""
    quoted = 'Note "\\\' {}\n_Id'  # a corpus name is any string (this one means note_id): it went into f-strings
    tools = [T("create_note", {"note_id": {"type": "string"}, "ｄｂ": {"type": "string"},
                               "ｒｏｗ": {"type": "string"}, "title": {"type": "string"}}, ["note_id", "ｄｂ"]),
             T("get_note", {"note_id": {"type": "string"}}, ["note_id"]),
             T("add_note", {quoted: {"type": "string"}, "title": {"type": "string"}}, [quoted])]
    record = {"domain": "dnotes001", "tools": [t.id for t in tools], "names": [t.name for t in tools], "edges": []}
    ws = Workspace(tmp_path / "ws")
    spec = synthesize_domain(ws, record, tools, unsafe=UNSAFE)
    code = (ws.domain_dir(spec.id) / "tools.py").read_text()
    compile(code, "tools.py", "exec", dont_inherit=True)  # compiled only, never run here
    names = {t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.NAME}
    assert all(n.isascii() for n in names), sorted(n for n in names if not n.isascii())
    assert spec.report["executes"] == 3, spec.report["validation"]["failures"]
    with Environment.open(ws.domain_dir(spec.id), unsafe=UNSAFE) as env:
        env.reset()
        made = env.call("create_note", {"note_id": "n9", "ｄｂ": "from-db", "ｒｏｗ": "from-row", "title": "t"})
        assert made.ok, made.error
        got = env.call("get_note", {"note_id": "n9"}).content
        assert "from-db" in got.values() and "from-row" in got.values(), got
        again = env.call("add_note", {quoted: "n9", "title": "t"})
        assert not again.ok and "already exists" in again.error, again
        assert env.call("add_note", {quoted: "n10", "title": "t2"}).ok
        assert env.call("get_note", {"note_id": "n10"}).content["title"] == "t2"


def test_a_create_whose_id_is_optional_gives_one_when_the_caller_leaves_it_out(tmp_path):
    """A corpus create tool whose id parameter is optional: the caller may leave the id to the
    service. The environment then makes one (it failed with `NOT NULL constraint failed` before: a
    fifth of the 30k build's failed walk calls), and the output carries it for the next call to use;
    a given id is still taken as given. Run in the sandbox, both tools.py variants (explicit
    parameters and **params)."""
    tools = [T("create_ticket", {"ticket_id": {"type": "string"}, "title": {"type": "string"}}, ["title"]),
             T("get_ticket", {"ticket_id": {"type": "string"}}, ["ticket_id"]),
             T("add-counter", {"counter-id": {"type": "integer"}, "label": {"type": "string"}}, ["label"])]
    record = {"domain": "dtickets1", "tools": [t.id for t in tools], "names": [t.name for t in tools], "edges": []}
    ws = Workspace(tmp_path / "ws")
    spec = synthesize_domain(ws, record, tools, unsafe=UNSAFE)
    with Environment.open(ws.domain_dir(spec.id), unsafe=UNSAFE) as env:
        env.reset()
        made = env.call("create_ticket", {"title": "printer down"})
        assert made.ok, made.error
        new_id = made.content["ticket_id"]
        assert new_id and env.call("get_ticket", {"ticket_id": new_id}).content["title"] == "printer down"
        given = env.call("create_ticket", {"ticket_id": "tk-given", "title": "t2"})
        assert given.ok and given.content["ticket_id"] == "tk-given", given
        assert not env.call("create_ticket", {"ticket_id": "tk-given", "title": "t3"}).ok  # still one per id
        counted = env.call("add-counter", {"label": "a"})
        assert counted.ok and isinstance(counted.content["counter_id"], int), counted  # its column: counter_id
