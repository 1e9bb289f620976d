"""Ingest: normalization, filtering with counted reasons, naming, dedup, merge, bad input, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from agentscaler.artifacts import load_tools
from agentscaler.models import NAME_RE
from agentscaler.schemas import SchemaChecker
from agentscaler.workspace import Workspace
from tasks.corpus.common import RawTool
from tasks.corpus.ingest import build_corpus, infer_returns, ingest, normalize_name

CORPORA = Path(__file__).resolve().parents[2] / "data" / "corpora"
GOOD = [CORPORA / d for d in ("toolbench", "xlam", "bfcl", "openai", "mcp", "tau2", "nestful")]


def raw(name="get_thing", desc="Get one thing by its id.", params=None, source="openai", **kw) -> RawTool:
    params = params if params is not None else {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    return RawTool(source_name=name, source=source, description=desc, parameters=params, where=f"test ({name})", **kw)


def test_ingest_fixtures_end_to_end(tmp_path):
    ws = Workspace(tmp_path / "ws")
    report = ingest(ws, GOOD)
    assert report["ok"] and report["written"]
    assert set(report["sources"]) == {"toolbench", "xlam", "bfcl", "openai", "mcp", "tau2", "nestful"}
    # exactly the fixture's bad tools are rejected, each for its reason
    assert report["rejected"] == {"duplicate": 1, "duplicate_parameter": 1, "invalid_schema": 1, "no_description": 1}
    assert report["accepted"] == sum(report["sources"].values()) == 19
    assert report["param_types"]["string"] > 5
    saved = json.loads(ws.corpus_report_path.read_text())
    assert saved["accepted"] == 19 and saved["rejected"] == report["rejected"]
    tools = load_tools(ws.tools_path)
    assert len(tools) == 19 and len({t.name for t in tools}) == 19 and len({t.id for t in tools}) == 19
    for t in tools:
        assert NAME_RE.match(t.name) and t.name.isidentifier()
        assert t.id == t.spec_hash()
        Draft202012Validator.check_schema(t.parameters)  # the full, uncached check
    by = {t.source_name: t for t in tools}
    assert by["math.factorial"].name == "math_factorial" and by["send-email"].name == "send_email"
    assert by["cancel_order"].kind == "write" and by["cancel_order"].category == "shop"


def test_reingest_merges_without_duplicates(tmp_path):
    ws = Workspace(tmp_path / "ws")
    first = ingest(ws, GOOD[:3])
    ids_before = {t.id: t.name for t in load_tools(ws.tools_path)}
    second = ingest(ws, GOOD)  # overlaps the first
    assert second["new"] == second["accepted"] - first["accepted"]
    again = ingest(ws, GOOD)
    assert again["new"] == 0 and again["total"] == second["total"]
    tools = load_tools(ws.tools_path)
    assert len(tools) == len({t.id for t in tools}) == second["total"]
    after = {t.id: t.name for t in tools}
    assert all(after[i] == n for i, n in ids_before.items())  # existing tools keep their names


def test_collisions_are_disambiguated_deterministically():
    a = raw("search", "Search the product catalog by keyword.")
    b = raw("search!", "Search the order history of a user.")
    c = raw("search", "Search the product catalog by keyword.", source="mcp")  # same normalized spec as a
    t1, _, r1 = build_corpus([a, b, c])
    t2, _, r2 = build_corpus([c, b, a])
    assert sorted(t.name for t in t1) == sorted(t.name for t in t2)
    assert {t.id for t in t1} == {t.id for t in t2}
    assert len(t1) == 2 and r1["rejected"] == {"duplicate": 1}
    names = sorted(t.name for t in t1)
    assert names[0] == "search" and names[1].startswith("search_") and len(names[1]) == len("search_") + 6


def test_a_look_alike_never_takes_the_real_name():
    """Issue 22 class 8: `get<zero-width space>_user` normalized to `get_user`; whichever key
    sorted first took the plain name, so a look-alike could push the real tool to `get_user_<hash>`,
    and one ingested earlier kept the name when the real one arrived later. Now a name spelled
    with anything but ASCII always carries a hash of its own spelling."""
    real = raw("get_user", "Get a user's profile by its id.")
    looks = [raw("get\u200b_user", f"Get a user's profile by its id (mirror {i}).") for i in range(8)]
    tools, _, _ = build_corpus([*looks, real])
    names = {t.name: t.source_name for t in tools}
    assert names["get_user"] == "get_user" and len(names) == 9
    assert all(n.isascii() and n.isidentifier() for n in names)
    first, _, _ = build_corpus(looks[:1])  # the look-alike comes first, in an earlier ingest
    both, new, _ = build_corpus([real], existing=first)
    assert [t.name for t in new] == ["get_user"] and first[0].name.startswith("get_user_")
    assert normalize_name("ｇｅｔ_ｕｓｅｒ").startswith("get_user_")  # fullwidth folds, and is marked as folded
    assert normalize_name("ｇｅｔ_ｕｓｅｒ") != normalize_name("get\u200b_user")


@pytest.mark.parametrize("tool,reason", [
    (raw(desc=""), "no_description"),
    (raw(desc="get"), "trivial_description"),
    (raw(name="get_thing", desc="get thing"), "trivial_description"),
    (raw(name="查询天气"), "bad_name"),
    (raw(name="1st_tool"), "bad_name"),
    (raw(params={"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(51)}}), "too_many_parameters"),
    (raw(params={"type": "object", "properties": {"": {"type": "string"}}}), "unnamed_parameter"),
    (raw(param_names=["a", "a"], params={"type": "object", "properties": {"a": {}}}), "duplicate_parameter"),
    (raw(params={"type": "object", "properties": {"a": {"type": 5}}}), "invalid_schema"),
    (raw(params={"type": "array"}), "invalid_schema"),
    (raw(params=["not", "a", "schema"]), "invalid_schema"),
    (raw(params={"type": "object", "properties": {}, "required": ["ghost"]}), "invalid_schema"),
    (raw(desc="x " * 5000), "oversized"),
    (raw(problem="too_deep: schema nested deeper than 24 levels"), "too_deep"),
    # issue 22 class 7: schemas whose checks would not end, or would backtrack for minutes
    (raw(params={"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
                 "$defs": {"x": {"anyOf": [{"$ref": "#/$defs/x"}]}}}), "cyclic_ref"),
    (raw(params={"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}), "bad_ref"),
    (raw(params={"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}), "bad_ref"),
    (raw(params={"type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "$defs": {
        **{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(12)}, "d12": {}}}), "ref_fanout"),
    (raw(params={"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}), "unsafe_pattern"),
    (raw(params={"type": "object", "properties": {"a": {"type": "object", "patternProperties": {"(x|xy)*z": {}}}}}),
     "unsafe_pattern"),
])
def test_filters_count_each_reason(tool, reason):
    tools, _, report = build_corpus([tool])
    assert tools == [] and report["rejected"] == {reason: 1}


def test_names_are_identifiers():
    assert normalize_name("math.factorial") == "math_factorial"
    assert normalize_name("get-user  details!") == "get_user_details"
    assert normalize_name("class") == "class_"
    long = normalize_name("a" * 100)
    assert len(long) <= 64 and long.isidentifier() and long != normalize_name("a" * 101)
    assert normalize_name("???") is None


def test_infer_returns_option():
    assert infer_returns("is_available", "")["type"] == "boolean"
    assert infer_returns("list_orders", "")["type"] == "array"
    tools, _, _ = build_corpus([raw("list_orders", "List the orders of a user.")], add_returns=True)
    assert tools[0].returns["type"] == "array"


def test_strict_writes_nothing_and_empty_is_not_ok(tmp_path):
    ws = Workspace(tmp_path / "ws")
    report = ingest(ws, [*GOOD, CORPORA / "bad"], strict=True)
    assert not report["ok"] and not report["written"] and not ws.tools_path.exists()
    report = ingest(ws, [CORPORA / "bad" / "empty.json", tmp_path / "missing.json"])
    assert report["accepted"] == 0 and not report["ok"]
    assert any("missing.json" in e and "no such file" in e for e in report["errors"])


def test_bad_input_is_reported_and_the_rest_ingested(tmp_path):
    ws = Workspace(tmp_path / "ws")
    report = ingest(ws, [*GOOD, CORPORA / "bad"])
    assert report["ok"] and report["accepted"] == 20  # the 19 good ones + good_one from mixed_lines.jsonl
    errs = "\n".join(report["errors"])
    for needle in ("empty.json", "image.json: unreadable_file: binary", "latin1.json: unreadable_file: not UTF-8",
                   "mixed_lines.jsonl:2: malformed_json", "mixed_lines.jsonl:3: malformed_json: invalid JSON: NaN",
                   "truncated.json: malformed_json", "(broken_schema): invalid_schema", "convert_twice): duplicate_parameter"):
        assert needle in errs, needle


# --- the cached meta-schema check agrees with the full one ----------------------------------------

_leaf = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["string", "integer", "number", "boolean", "array", "object", "null", "strng", 5]),
    "description": st.one_of(st.text(max_size=20), st.integers()),
    "enum": st.one_of(st.lists(st.integers(), max_size=3), st.just("x")),
    "default": st.one_of(st.integers(), st.text(max_size=5)),
    "required": st.one_of(st.lists(st.sampled_from(["a", "b"]), max_size=3), st.just("a")),
    "minimum": st.one_of(st.integers(), st.text(max_size=2)),
})
_schema = st.recursive(_leaf, lambda inner: st.one_of(
    st.builds(lambda s, p: {**s, "properties": p}, _leaf, st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    st.builds(lambda s, i: {**s, "items": i}, _leaf, st.one_of(inner, st.integers())),
    st.builds(lambda s, a: {**s, "anyOf": a}, _leaf, st.lists(st.one_of(inner, st.integers()), max_size=3)),
), max_leaves=8)


@settings(max_examples=80, deadline=None)
@given(_schema)
def test_cached_check_matches_full_metaschema_check(schema):
    full_ok = Draft202012Validator(Draft202012Validator.META_SCHEMA,
                                   format_checker=Draft202012Validator.FORMAT_CHECKER).is_valid(schema)
    checker = SchemaChecker()
    assert (checker.error(schema) is None) == full_ok
    assert (checker.error(schema) is None) == full_ok  # and again from the cache


# --- hostile files: never crash, always name the file -----------------------------------------------

_hostile = st.one_of(
    st.binary(max_size=200),
    st.just(b""), st.just(b"   \n\n"),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(1000, 100_000).map(lambda d: ("[" * d + "]" * d).encode()),
    st.integers(1000, 5000).map(lambda d: ('{"tools": [{"name": "t", "description": "deep tool here", "inputSchema": '
                                           + '{"type": "object", "properties": {"a": ' * d + "{}" + "}}" * d + "}]}").encode()),
    st.integers(100_000, 1_000_000).map(lambda n: json.dumps({"type": "function", "function": {
        "name": "big", "description": "x" * n, "parameters": {"type": "object", "properties": {}}}}).encode()),
    st.sampled_from([b'{"a": NaN}', b'[{"name": "n", "description": "Infinity default here", "parameters": '
                     b'{"type": "object", "properties": {"x": {"default": Infinity}}}}]',
                     b'{"tools": [{"name": "d", "name": "d2", "description": "duplicate keys in it", "inputSchema": {}}]}',
                     b'\xff\xfe\x00\x00garbage', b'{"name": "caf\xe9"}', b'"\\ud800"',
                     b'{"type": "function", "function": {"name": "\\ud800x", "description": "lone surrogate name"}}']),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
                 lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.sampled_from(
                     ["name", "description", "parameters", "tools", "function", "api_list", "type", "properties",
                      "inputSchema", "query_parameters", "required"]), c, max_size=5)),
                 max_leaves=20).map(lambda o: json.dumps(o).encode()),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=_hostile, suffix=st.sampled_from([".json", ".jsonl", ".py"]))
def test_hostile_files_never_crash(tmp_path, data, suffix):
    d = tmp_path / "in"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    bad = d / f"hostile{suffix}"
    bad.write_bytes(data)
    shutil.copy(CORPORA / "openai" / "tools.json", d / "good.json")
    ws_dir = tmp_path / "ws"
    shutil.rmtree(ws_dir, ignore_errors=True)
    report = ingest(Workspace(ws_dir), [d, bad])  # the folder, and the file itself (folders skip *.py but tools.py)
    assert report["accepted"] >= 2  # the good file always survives
    for e in report["errors"]:
        assert e.startswith(str(d)) and ": " in e
    json.dumps(report)  # the report is always serializable
    if suffix == ".py":
        assert any("hostile.py" in e for e in report["errors"])
    tools = load_tools(ws_dir / "corpus" / "tools.parquet")
    for t in tools:
        Draft202012Validator.check_schema(t.parameters)
        t.model_dump_json().encode("utf-8")


# --- CLI ---------------------------------------------------------------------------------------------

def test_cli_ingest_json_and_exit_codes(tmp_path):
    from flows.cli import app

    runner = CliRunner()
    ws = str(tmp_path / "ws")
    res = runner.invoke(app, ["-w", ws, "ingest", str(CORPORA / "openai"), str(CORPORA / "bad" / "truncated.json"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["accepted"] == 2 and out["rejected"] == {"invalid_schema": 1, "malformed_json": 1}
    assert set(out) >= {"accepted", "rejected", "sources"} and out["sources"] == {"openai": 2}
    assert "truncated.json: malformed_json" in res.stderr
    res = runner.invoke(app, ["-w", ws, "ingest", str(CORPORA / "openai"), "--strict", "--json"])
    assert res.exit_code == 1
    res = runner.invoke(app, ["-w", ws, "ingest", str(CORPORA / "bad" / "empty.json")])
    assert res.exit_code == 1
    res = runner.invoke(app, ["-w", ws, "ingest", str(CORPORA / "openai"), "--format", "nope"])
    assert res.exit_code == 2


def test_unreadable_existing_corpus_is_never_overwritten(tmp_path):
    from tasks.corpus.ingest import IngestError

    ws = Workspace(tmp_path / "ws")
    ws.tools_path.write_bytes(b"not parquet")
    with pytest.raises(IngestError, match="not overwriting"):
        ingest(ws, [CORPORA / "openai"])
    assert ws.tools_path.read_bytes() == b"not parquet"
