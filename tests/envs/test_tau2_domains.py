"""Building tau2-bench airline and retail as our domain folders (real db.json, real SQLite)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sqlite3
import stat
from pathlib import Path

import jsonschema
import pytest

from envs.spec import DomainSpec
from envs.tau2 import build as build_mod
from envs.tau2.build import build_tau2_domain
from envs.tau2.calls import task_actions
from envs.tau2.source import data_dir

WRITES = {
    "airline": {"book_reservation", "cancel_reservation", "send_certificate", "update_reservation_baggages",
                "update_reservation_flights", "update_reservation_passengers"},
    "retail": {"cancel_pending_order", "exchange_delivered_order_items", "modify_pending_order_address",
               "modify_pending_order_items", "modify_pending_order_payment", "modify_user_address",
               "return_delivered_order_items"},
}
COUNTS = {
    "airline": {"flights": 300, "flight_dates": 9000, "users": 500, "payment_methods": 1486, "reservations": 2000},
    "retail": {"products": 50, "variants": 591, "users": 500, "payment_methods": 695, "orders": 1000},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[DomainSpec, Path]]:
    root = tmp_path_factory.mktemp("tau2dom")
    return {d: (build_tau2_domain(d, root / d), root / d) for d in ("airline", "retail")}


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_spec_tools_and_kinds_come_from_tau2(domain, built):
    spec, ddir = built[domain]
    assert DomainSpec.load(ddir) == spec
    assert spec.synthesizer == "tau2" and spec.clock == "2024-05-15T15:00:00"
    assert {t.name for t in spec.tools if t.kind == "write"} == WRITES[domain]
    assert {"calculate", "transfer_to_human_agents", "get_user_details"} <= {t.name for t in spec.tools}
    code = (ddir / "tools.py").read_text()
    defined = {n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)}
    assert {t.name for t in spec.tools} <= defined
    for t in spec.tools:
        jsonschema.Draft202012Validator.check_schema(t.parameters)
        assert t.description and t.parameters["type"] == "object"


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_tau2_tool_is_constrained_by_its_schema(domain, built):
    """Airline's nested models are pydantic $refs: the grammar must take them (it failed every request)."""
    from agentscaler.decoding import tool_calls_grammar

    spec, _ = built[domain]
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": t.parameters}} for t in spec.tools]
    assert domain == "retail" or any("$ref" in json.dumps(t.parameters) for t in spec.tools)
    gbnf, loose = tool_calls_grammar(tools)
    assert loose == [] and "tool-call ::=" in gbnf


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_tau2_task_actions_validate_against_the_schemas(domain, built):
    spec, _ = built[domain]
    validators = {t.name: jsonschema.Draft202012Validator(t.parameters) for t in spec.tools}
    n = 0
    for task_id, calls in task_actions(domain):
        for c in calls:
            errors = list(validators[c["name"]].iter_errors(c["arguments"]))
            assert not errors, f"task {task_id} {c['name']}: {errors[0].message}"
            n += 1
    assert n > 100
    # and a wrong argument is rejected
    flight_tool = "book_reservation" if domain == "airline" else "modify_pending_order_items"
    assert list(validators[flight_tool].iter_errors({"order_id": 3}))


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_seed_rows_match_db_json(domain, built):
    spec, ddir = built[domain]
    seed = ddir / "seed.sqlite"
    assert not Path(f"{seed}-wal").exists()
    assert not os.stat(seed).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read-only seed
    head = seed.read_bytes()[:100]
    assert head[18:20] == b"\x01\x01"  # rollback journal: the WAL was checkpointed into the file
    con = sqlite3.connect(f"file:{seed}?mode=ro", uri=True)
    for t in spec.tables:
        assert con.execute(f'SELECT COUNT(*) FROM "{t.name}"').fetchone()[0] == COUNTS[domain][t.name]
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t.name}")')]
        assert cols == [c.name for c in t.columns]
    data = json.loads((data_dir(domain) / "db.json").read_text())
    uid = next(iter(data["users"]))
    name = con.execute("SELECT name FROM users WHERE user_id = ?", (uid,)).fetchone()[0]
    assert json.loads(name) == data["users"][uid]["name"]
    if domain == "airline":
        f = data["flights"]["HAT001"]
        row = con.execute("SELECT status, seats_economy FROM flight_dates WHERE flight_number='HAT001' "
                          "AND date='2024-05-01'").fetchone()
        assert row[0] == f["dates"]["2024-05-01"]["status"]
    con.close()
    # spec.json is written last: its presence means the environment is finished
    assert all(os.stat(ddir / "spec.json").st_mtime_ns >= os.stat(ddir / p).st_mtime_ns
               for p in ("models.py", "tools.py", "seed.sqlite"))


def test_models_py_declares_every_table(built):
    spec, ddir = built["airline"]
    import importlib.util
    import sys

    mspec = importlib.util.spec_from_file_location("tau2_airline_models", ddir / "models.py")
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[mspec.name] = mod  # generated by envs.store from our own spec, not tool code
    try:
        mspec.loader.exec_module(mod)
    finally:
        del sys.modules[mspec.name]
    assert set(mod.Base.metadata.tables) == {t.name for t in spec.tables}
    fd = mod.Base.metadata.tables["flight_dates"]
    assert [c.name for c in fd.primary_key.columns] == ["flight_number", "date"]


def test_rebuild_is_idempotent(built, tmp_path):
    spec, _ = built["retail"]
    again = build_tau2_domain("retail", tmp_path / "retail")
    assert again.model_dump() == spec.model_dump()


def test_bad_input_is_named(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown tau2 domain 'telecom'"):
        build_tau2_domain("telecom", tmp_path / "x")
    # tool code that lacks a tau2 tool is refused before anything is written
    fake = tmp_path / "code"
    fake.mkdir()
    (fake / "retail_tools.py").write_text("def calculate(db, expression):\n    return '0'\n")
    monkeypatch.setattr(build_mod, "HERE", fake)
    with pytest.raises(RuntimeError, match="lacks tau2 tools: .*get_order_details"):
        build_tau2_domain("retail", tmp_path / "retail")
    assert not (tmp_path / "retail" / "spec.json").exists()


def test_tau2_tasks_become_scenarios_through_the_sandbox(built):
    from agentscaler.models import Scenario
    from agentscaler.workspace import read_jsonl
    from envs.tau2.tasks import tau2_scenarios

    spec, ddir = built["retail"]
    scenarios, report = tau2_scenarios("retail", ddir, limit=6)
    assert report["errors"] == [] and len(scenarios) == 6
    rows = read_jsonl(ddir / "scenarios.jsonl")
    assert [Scenario.model_validate(r) for r in rows] == scenarios
    for s in scenarios:
        assert s.domain == spec.id and s.gold_calls and s.intent
        writes = [g for g in s.gold_calls if g.kind == "write"]
        assert s.read_only == (not writes)
        if writes:  # a gold write changes the state: the hash moves and the diff names the fields
            assert s.gold_hash != s.seed_hash and s.gold_diff
        else:
            assert s.gold_hash == s.seed_hash and not s.gold_diff
    assert len({s.id for s in scenarios}) == 6
