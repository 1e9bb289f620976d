"""The one JSON-Schema check: a malformed schema validates nothing, and nothing raises.

Before it, four checks disagreed on a malformed schema (arguments said valid, scenarios said
invalid or raised UnknownType, verify raised out of verify_trajectory, the environment returned
a tool error). Every caller now gets "invalid" with the schema's problem named."""

from __future__ import annotations

import time

import pytest
from jsonschema import Draft202012Validator

from agentscaler.schemas import check, errors, is_valid, schema_problem

MALFORMED = [{"type": "foo"}, {"type": "object", "properties": {"x": {"type": "foo"}}},
             {"type": "string", "pattern": "(unclosed"}, {"type": "object", "patternProperties": {"[": {}}},
             {"minimum": "three"}, {"type": "array", "items": 5}, "not a schema"]


@pytest.mark.parametrize("schema", MALFORMED)
def test_malformed_schema_validates_nothing_and_names_the_problem(schema) -> None:
    for value in ({}, {"x": 1}, "abc", 3, None):
        assert is_valid(value, schema) is False
    errs = errors({"x": 1}, schema)
    assert len(errs) == 1 and "invalid schema" in errs[0]
    assert schema_problem(schema)


def test_same_verdict_as_check_schema() -> None:
    for schema in MALFORMED[:-1] + [{"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$"}}}]:
        try:
            Draft202012Validator.check_schema(schema)
            full_ok = True
        except Exception:  # noqa: BLE001
            full_ok = False
        assert (schema_problem(schema) is None) == full_ok, schema


def test_a_reference_that_resolves_nowhere_is_malformed() -> None:
    """The meta-schema accepts it; it used to break only while a value was checked, and is found
    up front now (references are resolved when the schema is checked)."""
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    assert "names no subschema" in (schema_problem(schema) or "")
    assert is_valid({"x": 1}, schema) is False  # invalid, no exception
    assert "invalid schema" in errors({"x": 1}, schema)[0]


def test_well_formed_schema_and_no_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}, "when": {"format": "date"}},
              "required": ["n"]}
    assert is_valid({"n": 1, "when": "2024-05-01"}, schema)
    assert errors({"n": -1, "when": "yesterday"}, schema) and not is_valid({}, schema)
    assert check(schema).first_error({"n": -1}) == ("n", "-1 is less than the minimum of 0")
    assert is_valid({"anything": 1}, None) and errors(1, None) == []


def test_cache_by_identity_and_by_text() -> None:
    a = {"type": "string"}
    b = {"type": "string"}
    assert check(a) is check(a) and check(b).validator is check(a).validator


# --- issue 22, class 7: checking never crashes or hangs the caller -------------------------------
# Each of these raised, hung for minutes, or left the schema broken for every later value before.

def _deep_schema(levels: int) -> dict:
    schema: dict = {"type": "object"}
    cur = schema
    for _ in range(levels):
        cur["properties"] = {"a": {"type": "object"}}
        cur = cur["properties"]["a"]
    return schema


def _deep_list(levels: int) -> list:
    v: list = []
    for _ in range(levels):
        v = [v]
    return v


CYCLIC = [
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
     "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}},
    {"$ref": "#"},
    {"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}},
    {"$ref": "#/default", "default": {"anyOf": [{"$ref": "#/default"}]}},  # the target sits where no schema is
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("schema", CYCLIC)
def test_a_reference_cycle_is_malformed_not_a_crash(schema) -> None:
    """A `$ref` loop that consumes nothing of the value recursed until RecursionError on every value."""
    assert "cycl" in (schema_problem(schema) or "")
    assert is_valid({"x": 1}, schema) is False and "invalid schema" in errors({"x": 1}, schema)[0]


def test_a_recursive_schema_that_consumes_the_value_stays_valid() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {"children": {"type": "array",
                                                                              "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"}
    assert schema_problem(tree) is None
    assert is_valid({"children": [{"children": []}]}, tree) and not is_valid({"children": [5]}, tree)


@pytest.mark.timeout(60)
def test_references_that_fan_out_exponentially_are_malformed() -> None:
    """No cycle, but 2^40 subschema checks per value: it hung the caller."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(40)}
    defs["d40"] = {"type": "string"}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    assert "fan" in (schema_problem(schema) or "")
    assert is_valid("x", schema) is False


def test_a_schema_nested_too_deeply_is_malformed_not_a_crash() -> None:
    """schema_problem and check() raised RecursionError (out of Environment.open, ingestion, ...)."""
    deep = _deep_schema(3000)
    assert "deeper" in (schema_problem(deep) or "")
    assert check(deep).problem and is_valid({}, deep) is False


@pytest.mark.parametrize("pattern", ["^(a+)+$", "(a|aa)*b", r"^(\w+\s?)*$", "^(.*?,){11}P", "(x*)*y",
                                     "(" * 3000 + ")" * 3000])
def test_catastrophic_patterns_are_malformed(pattern) -> None:
    """Nested quantifiers and overlapping alternatives under a quantifier backtrack exponentially
    (a 23-character value took 0.6 s with `^(a+)+$`, doubling with every character)."""
    for schema in ({"type": "string", "pattern": pattern}, {"type": "object", "patternProperties": {pattern: {}}}):
        assert schema_problem(schema), schema
        assert is_valid("a" * 30 + "!", schema) is False


@pytest.mark.parametrize("pattern", [r"^\d{3}-\d{4}$", r"^(\d{1,3}\.){3}\d{1,3}$", "^(foo|bar)+$",
                                     r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$", "^(?:ab)+c?$"])
def test_ordinary_patterns_stay_valid(pattern) -> None:
    assert schema_problem({"type": "string", "pattern": pattern}) is None


@pytest.mark.timeout(60)
def test_a_slow_pattern_stops_at_the_deadline() -> None:
    """Adjacent overlapping quantifiers pass the static screen but backtrack polynomially: the stdlib
    engine took 7.7 s on 100 characters (minutes on 200). Every regex now runs under the check's
    deadline; the value gets an error, the schema stays usable."""
    schema = {"type": "string", "pattern": r"^[a-z]*[a-z]*[a-z]*[a-z]*[a-z]*\d$"}
    assert schema_problem(schema) is None
    t0 = time.monotonic()
    assert is_valid("a" * 20000, schema) is False
    assert "longer than" in errors("a" * 20000, schema)[0]
    assert time.monotonic() - t0 < 30
    assert is_valid("abc1", schema) and check(schema).problem is None


@pytest.mark.timeout(60)
def test_unique_items_is_linear() -> None:
    """uniqueItems compared unhashable items pairwise: 20,000 objects took minutes."""
    schema = {"type": "array", "uniqueItems": True}
    items = [{"i": i} for i in range(20000)]
    t0 = time.monotonic()
    assert is_valid(items, schema) and not is_valid(items + [{"i": 5}], schema)
    assert time.monotonic() - t0 < 10
    # JSON equality: 1 == 1.0, true != 1, key order does not matter
    assert not is_valid([1, 1.0], schema) and is_valid([True, 1], schema)
    assert not is_valid([{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}], schema) and is_valid([[1], [True]], schema)


@pytest.mark.parametrize("schema, bad", [
    ({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}, _deep_list(5000)),
    ({"type": "string", "format": "regex"}, "(" * 5000 + ")" * 5000),
])
def test_one_bad_value_does_not_break_the_schema(schema, bad) -> None:
    """A value that made the check recurse too deeply marked the *schema* malformed, in a cache
    shared by every environment of the process: one hostile argument broke the tool for good."""
    assert is_valid(bad, schema) is False
    assert errors(bad, schema)
    assert check(schema).problem is None
    good = [] if schema.get("type") != "string" else "^a+$"
    assert is_valid(good, schema), errors(good, schema)


def test_values_nested_too_deeply_are_invalid() -> None:
    """Depth is bounded before any keyword runs (every keyword may recurse into the value)."""
    schema = {"type": "array", "items": {"type": "array"}}
    assert is_valid(_deep_list(60), schema) and not is_valid(_deep_list(100), schema)
    assert "deeper than" in errors(_deep_list(100), schema)[0]


def test_nan_and_infinity_are_not_json_values() -> None:
    for v in (float("nan"), [float("inf")], {"x": float("-inf")}):
        assert is_valid(v, {}) is False and "NaN" in errors(v, {})[0]


def test_the_fast_path_gives_the_full_walks_verdict(monkeypatch) -> None:
    """schema_hazard answers None without its walk when none of the keywords it acts on occurs in the
    schema's JSON (most tool schemas). The verdict is the full walk's on every schema of the test
    corpora and the hazardous ones above, including keywords met only as property names."""
    import json
    from pathlib import Path

    from agentscaler import schemas

    root = Path(__file__).resolve().parents[1] / "data" / "corpora"
    found: list = [*CYCLIC, {"type": "object", "properties": {"pattern": {"type": "string"}, "if": {}}},
                   {"properties": {"a": {"$id": "x"}}}, {"type": "string", "pattern": "^(a+)+$"}]
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".json", ".jsonl")):
        try:
            text = f.read_text("utf-8")
            data = json.loads(text) if f.suffix == ".json" else [json.loads(x) for x in text.splitlines() if x.strip()]
        except (UnicodeDecodeError, ValueError):
            continue
        stack = [data]
        while stack:  # every object that looks like a parameter schema, wherever the format keeps it
            x = stack.pop()
            if isinstance(x, dict):
                if isinstance(x.get("properties"), dict) or "$ref" in x:
                    found.append(x)
                stack.extend(x.values())
            elif isinstance(x, list):
                stack.extend(x)
    assert len(found) > 40
    fast = [schemas.schema_hazard(s) for s in found]
    monkeypatch.setattr(schemas, "_HAZARD_KEYS", (b"",))  # b"" is in every text: always the full walk
    assert fast == [schemas.schema_hazard(s) for s in found]
    assert sum(h is not None for h in fast) >= len(CYCLIC)
