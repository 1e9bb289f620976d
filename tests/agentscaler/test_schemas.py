"""The one JSON-Schema check: a malformed schema validates nothing, and nothing raises.

Before it, four checks disagreed on a malformed schema (arguments said valid, scenarios said
invalid or raised UnknownType, verify raised out of verify_trajectory, the environment returned
a tool error). Every caller now gets "invalid" with the schema's problem named."""

from __future__ import annotations

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


def test_a_schema_that_breaks_while_checking_counts_as_malformed() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    assert schema_problem(schema) is None  # the meta-schema accepts it
    assert is_valid({"x": 1}, schema) is False  # the ref resolves nowhere: invalid, no exception
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
