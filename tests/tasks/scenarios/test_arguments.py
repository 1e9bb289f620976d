"""Grounded argument sampling: values from the state first, then earlier outputs, then the schema;
always valid against the tool's JSON Schema (checked with jsonschema + format checker)."""

from __future__ import annotations

import random

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from envs.spec import ToolSpec
from agentscaler.naming import column_key
from tasks.scenarios.values import gen_value
from tasks.scenarios.arguments import sample_arguments


def _tool(props: dict, required: list[str] | None = None, name: str = "t") -> ToolSpec:
    return ToolSpec(name=name, description="d", kind="read",
                    parameters={"type": "object", "properties": props, "required": required or []})


def _valid(schema: dict, value) -> bool:
    return Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(value)


ODD = {
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3, "uniqueItems": True},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "maxLength": 5}},
                "required": ["city", "zip"]},
    "mode": {"type": "string", "enum": ["fast", "slow"]},
    "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "count": {"type": "integer", "minimum": 3, "maximum": 7, "multipleOf": 2},
    "when": {"type": "string", "format": "date-time"},
    "day": {"type": "string", "format": "date"},
    "email": {"type": "string", "format": "email"},
    "maybe": {"type": ["string", "null"]},
    "either": {"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "minLength": 3}]},
    "code": {"type": "string", "minLength": 8, "maxLength": 8},
    "nested": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer", "maximum": -5}},
                                          "required": ["n"]}},
    "flag": {"type": "boolean"},
    "fixed": {"const": "v1"},
    "untyped": {},
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_schema_values_are_valid(name):
    rng = random.Random(1)
    for _ in range(25):
        assert _valid(ODD[name], gen_value(ODD[name], name, rng)), name


def test_sampled_arguments_validate_with_no_state():
    tool = _tool(ODD, required=["tags", "address", "mode", "ratio", "count"])
    rng = random.Random(3)
    for _ in range(30):
        args = sample_arguments(tool, {}, rng)
        assert set(tool.parameters["required"]) <= set(args)
        assert _valid(tool.parameters, args), args


def test_no_parameters():
    assert sample_arguments(_tool({}), {"users": [{"user_id": "u1"}]}, random.Random(0)) == {}


ROWS = {
    "users": [{"user_id": "u1", "name": "Ada", "email": "ada@example.com"},
              {"user_id": "u2", "name": "Alan", "email": "alan@example.com"}],
    "orders": [{"order_id": "o1", "user_id": "u1", "status": "placed", "total": 17.0},
               {"order_id": "o2", "user_id": "u2", "status": "delivered", "total": 3.25},
               {"order_id": "o3", "user_id": "u2", "status": "placed", "total": 35.0}],
}


def test_prefers_state_and_picks_one_coherent_row():
    tool = _tool({"order_id": {"type": "string"}, "user_id": {"type": "string"}}, ["order_id", "user_id"])
    rng = random.Random(0)
    pairs = {(o["order_id"], o["user_id"]) for o in ROWS["orders"]}
    for _ in range(20):
        a = sample_arguments(tool, ROWS, rng)
        assert (a["order_id"], a["user_id"]) in pairs  # both values from the same order row


def test_range_param_and_camel_case_match_columns():
    assert column_key("max_price") == "price" and column_key("userId") == "user_id"
    assert column_key("order_ids") == "order_id"
    tool = _tool({"userId": {"type": "string"}, "max_total": {"type": "number"}}, ["userId", "max_total"])
    a = sample_arguments(tool, ROWS, random.Random(2))
    assert a["userId"] in {"u1", "u2"} and a["max_total"] in {17.0, 3.25, 35.0}


def test_state_value_that_does_not_fit_the_schema_is_replaced():
    tool = _tool({"status": {"type": "string", "enum": ["open", "closed"]}}, ["status"])
    for seed in range(10):
        assert sample_arguments(tool, ROWS, random.Random(seed))["status"] in ("open", "closed")


def test_integer_parameter_gets_coerced_state_value():
    rows = {"items": [{"item_id": "7", "name": "x"}]}
    a = sample_arguments(_tool({"item_id": {"type": "integer"}}, ["item_id"]), rows, random.Random(0))
    assert a == {"item_id": 7}


def test_falls_back_to_earlier_outputs():
    tool = _tool({"reservation_id": {"type": "string"}}, ["reservation_id"])
    prior = [{"reservation": {"reservation_id": "R77", "seats": 2}}]
    assert sample_arguments(tool, ROWS, random.Random(0), prior)["reservation_id"] == "R77"


def test_deterministic_for_a_seed():
    tool = _tool(ODD, required=list(ODD)[:5])
    assert sample_arguments(tool, ROWS, random.Random(9)) == sample_arguments(tool, ROWS, random.Random(9))


def test_fresh_key_gives_a_new_primary_key_and_keeps_references():
    tool = _tool({"order_id": {"type": "string"}, "user_id": {"type": "string"}}, ["order_id", "user_id"])
    existing = {o["order_id"] for o in ROWS["orders"]}
    for seed in range(10):
        a = sample_arguments(tool, ROWS, random.Random(seed), fresh_key=True)
        assert a["order_id"] not in existing and a["user_id"] in {"u1", "u2"}


def test_integer_ids_in_a_state_list_fit_a_string_list_parameter():
    rows = {"infos": [{"info_id": "i1", "event_ids": [1, 4]}], "events": [{"event_id": 1}, {"event_id": 4}]}
    tool = _tool({"event_ids": {"type": "array", "items": {"type": "string"}}}, ["event_ids"])
    assert sample_arguments(tool, rows, random.Random(0)) == {"event_ids": ["1", "4"]}
