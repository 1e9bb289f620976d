"""Scenarios on the shop fixture: walks, grounded arguments, gold execution in the real sandbox."""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from agentscaler.artifacts import load_scenarios
from agentscaler.models import Scenario
from agentscaler.schemas import errors
from agentscaler.workspace import Workspace, read_jsonl
from envs.spec import DomainSpec
from tasks.scenarios.arguments import StateView, ground_arguments
from tasks.scenarios.build import build_scenarios, domain_split, generate
from tasks.scenarios.config import ScenarioParams
from tasks.scenarios.execute import replay, scenario_id
from tasks.scenarios.intents import check_intent
from tasks.scenarios.values import gen_value
from tasks.scenarios.walks import adjacency, plan_walk
from tests.data.domains.shop.build import build_shop, build_shop_leaving_traces


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shop(tmp_path_factory.mktemp("ws") / "domains" / "shop")


@pytest.fixture(scope="module")
def spec(shop: Path) -> DomainSpec:
    return DomainSpec.load(shop)


# --- walks and arguments (no environment needed) ----------------------------------------------

def test_walks_follow_edges_and_respect_kind(spec: DomainSpec) -> None:
    adj = {s: {d for d, _ in v} for s, v in adjacency(spec).items()}
    kinds = {t.name: t.kind for t in spec.tools}
    rng = random.Random(0)
    lengths = Counter()
    for i in range(300):
        want_write = i % 2 == 0
        path = plan_walk(spec, adjacency(spec), rng, target_len=1 + i % 4, want_write=want_write)
        assert path
        for a, b in zip(path, path[1:]):
            assert b in adj[a], f"{a}->{b} is not an edge"
        assert any(kinds[n] == "write" for n in path) == want_write or not want_write
        if not want_write:
            assert all(kinds[n] == "read" for n in path)
        else:
            assert any(kinds[n] == "write" for n in path)
        assert len(path) <= 1 + i % 4
        lengths[len(path)] += 1
    assert set(lengths) == {1, 2, 3}  # the shop graph's longest read/write chains


def test_walk_stops_at_a_tool_with_no_outgoing_edge(spec: DomainSpec) -> None:
    adj = adjacency(spec)
    assert adj["cancel_order"] == [] and adj["update_email"] == []
    rng = random.Random(1)
    for _ in range(100):
        path = plan_walk(spec, adj, rng, target_len=8, want_write=True)
        assert path[-1] in {"cancel_order", "update_email"} or not adj[path[-1]]


def test_arguments_always_schema_valid_and_grounded(spec: DomainSpec, shop: Path) -> None:
    state = StateView(spec, shop / "seed.sqlite")
    rng = random.Random(7)
    for i in range(400):
        tool = spec.tools[i % len(spec.tools)]
        args, sources = ground_arguments(tool, state, [], rng, optional_prob=0.5)
        assert errors(args, tool.parameters) == [], (tool.name, args)
        assert set(sources.values()) <= {"user"}
        if "user_id" in args:
            assert args["user_id"] in {"u1", "u2", "u3"}  # from the database, not invented
        if "order_id" in args:
            assert args["order_id"] in {"o1", "o2", "o3"}
        if "query" in args:
            assert args["query"] in {"Blue", "Red", "Mug", "Desk", "Lamp", "Notebook"}


def test_chaining_prefers_the_latest_output(spec: DomainSpec, shop: Path) -> None:
    state = StateView(spec, shop / "seed.sqlite")
    outputs = [{"user_id": "u3"}, [{"order_id": "o9", "user_id": "u2"}, {"order_id": "o8", "user_id": "u2"}]]
    rng = random.Random(3)
    for _ in range(50):
        args, sources = ground_arguments(spec.tool("cancel_order"), state, outputs, rng)
        assert args["order_id"] in {"o8", "o9"} and sources == {"order_id": "output"}
        args, sources = ground_arguments(spec.tool("get_user"), state, outputs, rng)
        assert args == {"user_id": "u2"} and sources["user_id"] == "output"


def test_schema_values_cover_formats_and_ranges() -> None:
    rng = random.Random(5)
    schemas = [
        {"type": "string", "format": "email"}, {"type": "string", "format": "date"},
        {"type": "string", "format": "date-time"}, {"type": "string", "enum": ["a", "b"]},
        {"type": "integer", "minimum": 3, "maximum": 4}, {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2},
        {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]},
        {"type": ["string", "null"], "minLength": 12}, {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    ]
    for s in schemas:
        for _ in range(30):
            v = gen_value(s, "v", rng)
            assert errors({"v": v}, {"type": "object", "properties": {"v": s}}) == [], (s, v)


def test_split_is_stable_and_tau2_configurable() -> None:
    ids = [f"d{i:04d}" for i in range(2000)]
    a = [domain_split(d) for d in ids]
    assert a == [domain_split(d) for d in ids]
    share = a.count("heldout") / len(a)
    assert 0.16 < share < 0.24
    assert domain_split("tau2-airline", heldout_fraction=0.0) == "heldout"
    assert domain_split("tau2-airline", heldout_fraction=0.0, tau2_heldout=False) == "train"
    assert all(domain_split(d, heldout_fraction=1.0) == "heldout" for d in ids[:50])


# --- gold execution in the real sandboxed environment -------------------------------------------

def _open(domain_dir: Path):
    from envs.episode import Environment

    return Environment.open(domain_dir, unsafe=os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1")


@pytest.fixture(scope="module")
def env(shop: Path):
    e = _open(shop)
    yield e
    e.close()


def _closing(env):
    """Close the environment when the block ends."""
    return contextlib.closing(env)


def _variant(dest: Path, tools: list[str], edges: bool = False, patch=None) -> Path:
    """A copy of the shop with a subset of its tools (and optionally a patched tool schema)."""
    d = build_shop(dest)
    spec = DomainSpec.load(d)
    spec = spec.model_copy(update={"tools": [t for t in spec.tools if t.name in tools],
                                   "edges": spec.edges if edges else []})
    if patch:
        patch(spec)
    (d / "spec.json").write_text(spec.model_dump_json(indent=2))
    return d


def _output_scalars(obj, out: set) -> set:
    if isinstance(obj, dict):
        for v in obj.values():
            _output_scalars(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _output_scalars(v, out)
    else:
        out.add(json.dumps(obj))
    return out


def test_build_writes_valid_grounded_scenarios(shop: Path, spec: DomainSpec, env) -> None:
    report = build_scenarios(shop, "shop", per_domain=40, max_length=4, seed=0, env=env)
    rows = read_jsonl(shop / "scenarios.jsonl")
    scen = [Scenario.model_validate(r) for r in rows]
    assert len(scen) == report["kept"] >= 30
    assert report["kept"] + sum(report["dropped"].values()) == report["attempts"]
    assert len({s.id for s in scen}) == len(scen)
    assert {s.read_only for s in scen} == {True, False}
    assert max(len(s.gold_calls) for s in scen) >= 3 and max(len(s.gold_calls) for s in scen) <= 4
    # the seed's oracle file, kept from gold execution's oracle: what computing it afresh gives
    from envs import store
    from envs.episode import ORACLE_FILE
    from envs.state import StateOracle

    fresh = StateOracle(spec.tables, store.load_seed_bytes(shop / spec.seed_path))
    assert json.loads((shop / ORACLE_FILE).read_text()) == json.loads(json.dumps(fresh.stored()))
    fresh.close()
    chained = 0
    for s in scen:
        assert s.split == domain_split("shop")
        assert s.id == scenario_id("shop", [c.model_dump() for c in s.gold_calls], s.gold_hash)
        if s.read_only:  # read-only scenarios leave the state as seeded; write scenarios change it
            assert s.gold_hash == s.seed_hash and s.gold_diff == []
        else:
            assert s.gold_hash != s.seed_hash and s.gold_diff
        facts = {json.dumps(v) for v in s.user_facts.values()}
        calls = [{"name": c.name, "arguments": c.arguments,
                  "sources": {a: "user" if json.dumps(v) in facts else "output" for a, v in c.arguments.items()}}
                 for c in s.gold_calls]
        assert check_intent(s.intent, {}, calls) == []  # every user value is in the intent text
        for i, c in enumerate(s.gold_calls):
            assert errors(c.arguments, spec.tool(c.name).parameters) == []
            assert c.kind == spec.tool(c.name).kind
            earlier = set()
            for prev in s.gold_calls[:i]:
                _output_scalars(prev.output, earlier)
            for a, v in c.arguments.items():
                if json.dumps(v) not in facts:  # not from the user: it must come from an earlier output
                    assert json.dumps(v) in earlier, (s.id, c.name, a, v)
                    chained += 1
            if i and c.kind == "read":  # no read repeated with the same args since the last write
                assert (c.name, c.arguments) != (s.gold_calls[i - 1].name, s.gold_calls[i - 1].arguments)
    assert chained >= 10
    assert report["counters"]["chained_args"] >= chained


def test_replay_determinism_over_many_seeds(shop: Path, spec: DomainSpec, env) -> None:
    params = ScenarioParams(per_domain=8, max_length=4)
    for seed in range(12):
        p = params.model_copy(update={"seed": seed})
        scen, _ = generate(env, spec, shop, "shop", p)
        assert scen
        again, _ = generate(env, spec, shop, "shop", p)
        assert [s.id for s in again] == [s.id for s in scen]  # same seed, same scenarios
        for s in scen:
            calls = [{"name": c.name, "arguments": c.arguments} for c in s.gold_calls]
            for _ in range(2):
                h, outs = replay(env, calls)
                assert h == s.gold_hash
                assert outs == [c.output for c in s.gold_calls]


def test_duplicates_dropped(tmp_path: Path) -> None:
    d = _variant(tmp_path / "one", ["get_user"])
    with _closing(_open(d)) as e:
        report = build_scenarios(d, "one", per_domain=10, max_length=3, seed=1, env=e)
    assert report["kept"] == 3  # three users, one read each: everything else repeats
    assert report["dropped"]["duplicate"] > 0
    ids = [r["id"] for r in read_jsonl(d / "scenarios.jsonl")]
    assert len(ids) == len(set(ids)) == 3


def test_noop_writes_dropped(tmp_path: Path) -> None:
    def only_ada(spec: DomainSpec) -> None:
        spec.tool("update_email").parameters["properties"]["email"] = {"type": "string", "enum": ["ada@example.com"]}

    d = _variant(tmp_path / "mail", ["update_email"], patch=only_ada)
    with _closing(_open(d)) as e:
        report = build_scenarios(d, "mail", per_domain=5, max_length=1, seed=0, env=e)
    # u1 already has that email: the write changes nothing and is dropped; u2 and u3 change
    assert report["kept"] == 2 and report["dropped"]["noop_write"] > 0
    for r in read_jsonl(d / "scenarios.jsonl"):
        assert r["gold_calls"][0]["arguments"]["user_id"] in {"u2", "u3"} and r["gold_hash"] != r["seed_hash"]


@pytest.mark.skipif(os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1", reason="needs a writable scratch (bubblewrap)")
def test_no_walk_sees_what_tool_code_left_in_an_earlier_one(tmp_path: Path) -> None:
    """The walks run one after another in one sandbox child (no fork per walk), each from the seed
    with tools.py run afresh and scratch emptied (GoldEpisode, Environment.restart): `remember`
    keeps every note it is given in a module global and writes each to a file, and answers with
    both, yet every kept scenario's output shows its own note and one file only, also after
    read-only walks (which leave the database at the seed). One fork in all: the determinism
    replay's child, which ran none of the walks."""
    d = build_shop_leaving_traces(tmp_path / "traces", ["update_email"])
    with _closing(_open(d)) as e:
        forks = []
        fresh = e.worker.fresh
        e.worker.fresh = lambda *a, **k: forks.append(1) or fresh(*a, **k)
        report = build_scenarios(d, "traces", per_domain=8, max_length=1, seed=0, env=e, read_share=0.5)
    kept = read_jsonl(d / "scenarios.jsonl")
    notes = [r["gold_calls"][0] for r in kept if r["read_only"]]
    assert len(notes) == 4  # the four notes the schema allows, each a walk of its own
    assert all(c["output"] == {"seen": [c["arguments"]["note"]], "files": ["note-1"]} for c in notes)
    assert "nondeterministic" not in report["dropped"]
    assert forks == [1]


CLOCKED = """

import datetime as _clock

_get_user, _update_email = get_user, update_email


def get_user(db, user_id: str) -> dict:  # its output differs on every call: the wall clock
    return {**_get_user(db, user_id), "seen_at": _clock.datetime.now().isoformat()}


def update_email(db, user_id: str, email: str) -> dict:  # the state it leaves differs on every call
    return _update_email(db, user_id, f"{_clock.datetime.now().microsecond}.{email}")
"""


def test_nondeterministic_tools_dropped_by_the_batched_replay(tmp_path: Path) -> None:
    """The determinism replay of a domain's walks goes in one round trip at the end (replay_many):
    a read whose output and a write whose final state differ on a second run are still caught
    and dropped, and further walks of the deterministic tool take their places."""
    d = _variant(tmp_path / "clocked", ["get_user", "update_email", "list_user_orders"])
    (d / "tools.py").write_text((d / "tools.py").read_text() + CLOCKED)
    with _closing(_open(d)) as e:
        report = build_scenarios(d, "clocked", per_domain=4, max_length=1, seed=0, env=e, read_share=0.5)
    kept = read_jsonl(d / "scenarios.jsonl")
    # two reads wanted and found (list_user_orders of two users); every write walk was update_email
    # and none survived its replay; get_user's reads were dropped the same way
    assert report["kept"] == len(kept) == 2
    assert {c["name"] for r in kept for c in r["gold_calls"]} == {"list_user_orders"}
    assert report["dropped"]["nondeterministic"] >= 3
    assert set(report["dropped"]) <= {"nondeterministic", "duplicate"}


def test_skip_rebuild_and_catalog(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    build_shop(ws.domain_dir("shop"))
    r1 = build_scenarios(ws, "shop", per_domain=5, max_length=3, seed=0)
    assert not r1["skipped"] and r1["kept"] == 5
    r2 = build_scenarios(ws, "shop", per_domain=5, max_length=3, seed=0)
    assert r2["skipped"] and r2["kept"] == 5
    r3 = build_scenarios(ws, "shop", per_domain=5, max_length=3, seed=1)
    assert not r3["skipped"]
    from agentscaler.catalog import Catalog

    st = Catalog(ws.catalog_path).stage_status("shop", "scenarios")
    assert st["status"] == "done" and st["artifact"]
    assert len(load_scenarios(ws)) == 5


def test_cli_scenarios_and_show(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    ws = Workspace(tmp_path / "ws")
    build_shop(ws.domain_dir("shop"))
    runner = CliRunner()
    res = runner.invoke(app, ["-w", str(ws.root), "scenarios", "--per-domain", "6", "--max-length", "3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["scenarios"] == 6 and out["failed"] == {}
    res = runner.invoke(app, ["-w", str(ws.root), "show", "scenarios", "--domain", "shop", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert len(rows) == 6
    assert set(rows[0]) == {"id", "domain", "read_only", "gold_calls", "gold_hash", "intent"}
    assert set(rows[0]["gold_calls"][0]) == {"name", "arguments"}
