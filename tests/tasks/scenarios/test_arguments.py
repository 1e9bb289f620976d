"""The one argument sampler: earlier outputs first, then one coherent row of the database state,
then the schema; always valid against the tool's JSON Schema (checked with jsonschema + format
checker). Plain data here: the state is built from rows, the outputs are hand-written."""

from __future__ import annotations

import random
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from agentscaler.naming import column_key
from envs.spec import ColumnSpec, DomainSpec, TableSpec, ToolSpec
from tasks.scenarios.arguments import StateView, ground_arguments, param_keys
from tasks.scenarios.values import gen_value


def _tool(props: dict, required: list[str] | None = None, name: str = "t", kind: str = "read") -> ToolSpec:
    return ToolSpec(name=name, description="d", kind=kind,
                    parameters={"type": "object", "properties": props, "required": required or []})


def _valid(schema: dict, value) -> bool:
    return Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(value)


def _state(rows: dict[str, list[dict[str, Any]]]) -> StateView:
    """A StateView over `rows` (the first column of a table is its key)."""
    tables = [TableSpec(name=t, primary_key=[next(iter(rs[0]))], columns=[
        ColumnSpec(name=c, type="json" if isinstance(v, (list, dict)) else "integer" if isinstance(v, int) else
                   "real" if isinstance(v, float) else "text") for c, v in rs[0].items()]) for t, rs in rows.items()]
    return StateView(DomainSpec(id="d", name="d", tools=[], tables=tables), rows=rows)


def _args(tool: ToolSpec, rows: dict, seed: int, outputs: list | None = None, **kw) -> dict[str, Any]:
    return ground_arguments(tool, _state(rows), outputs or [], random.Random(seed), **kw)[0]


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
        args, sources = ground_arguments(tool, _state({}), [], rng, optional_prob=0.5)
        assert set(tool.parameters["required"]) <= set(args) and set(sources.values()) == {"user"}
        assert _valid(tool.parameters, args), args


def test_no_parameters():
    assert _args(_tool({}), {"users": [{"user_id": "u1"}]}, 0) == {}


ROWS = {
    "users": [{"user_id": "u1", "name": "Ada", "email": "ada@example.com"},
              {"user_id": "u2", "name": "Alan", "email": "alan@example.com"}],
    "orders": [{"order_id": "o1", "user_id": "u1", "status": "placed", "total": 17.0},
               {"order_id": "o2", "user_id": "u2", "status": "delivered", "total": 3.25},
               {"order_id": "o3", "user_id": "u2", "status": "placed", "total": 35.0}],
}


def test_database_values_come_from_one_coherent_row():
    tool = _tool({"order_id": {"type": "string"}, "user_id": {"type": "string"}}, ["order_id", "user_id"])
    pairs = {(o["order_id"], o["user_id"]) for o in ROWS["orders"]}
    for seed in range(20):
        a = _args(tool, ROWS, seed)
        assert (a["order_id"], a["user_id"]) in pairs  # both values from the same order row


def test_earlier_outputs_come_first():
    """Chaining wins over the database, and one output record gives values that belong together."""
    tool = _tool({"order_id": {"type": "string"}, "user_id": {"type": "string"}}, ["order_id", "user_id"])
    outputs = [[{"order_id": "o8", "user_id": "u8"}, {"order_id": "o9", "user_id": "u9"}]]
    for seed in range(20):
        args, sources = ground_arguments(tool, _state(ROWS), outputs, random.Random(seed))
        assert (args["order_id"], args["user_id"]) in {("o8", "u8"), ("o9", "u9")}
        assert sources == {"order_id": "output", "user_id": "output"}
    reservation = _tool({"reservation_id": {"type": "string"}}, ["reservation_id"])
    assert _args(reservation, ROWS, 0, [{"reservation": {"reservation_id": "R77", "seats": 2}}]) == {"reservation_id": "R77"}


def test_the_row_agrees_with_chained_values():
    tool = _tool({"order_id": {"type": "string"}, "user_id": {"type": "string"}}, ["order_id", "user_id"])
    for seed in range(20):
        a, sources = ground_arguments(tool, _state(ROWS), [{"user_id": "u1"}], random.Random(seed))
        assert a == {"user_id": "u1", "order_id": "o1"} and sources == {"user_id": "output", "order_id": "user"}


def test_range_param_and_camel_case_match_columns():
    assert column_key("max_price") == "price" and column_key("userId") == "user_id"
    assert param_keys("restaurantsId")[-1] == "restaurant_id" and "account_id" in param_keys("source_account_id")
    tool = _tool({"userId": {"type": "string"}, "max_total": {"type": "number"}}, ["userId", "max_total"])
    a = _args(tool, ROWS, 2)
    assert a["userId"] in {"u1", "u2"} and a["max_total"] in {17.0, 3.25, 35.0}


def test_state_value_that_does_not_fit_the_schema_is_replaced():
    tool = _tool({"status": {"type": "string", "enum": ["open", "closed"]}}, ["status"])
    for seed in range(10):
        assert _args(tool, ROWS, seed)["status"] in ("open", "closed")


def test_integer_parameter_gets_coerced_state_value():
    rows = {"items": [{"item_id": "7", "name": "x"}]}
    assert _args(_tool({"item_id": {"type": "integer"}}, ["item_id"]), rows, 0) == {"item_id": 7}


def test_deterministic_for_a_seed():
    tool = _tool(ODD, required=list(ODD)[:5])
    assert _args(tool, ROWS, 9) == _args(tool, ROWS, 9)


def test_fresh_key_gives_a_new_primary_key_and_keeps_references():
    tool = _tool({"order_id": {"type": "string"}, "user_id": {"type": "string"}}, ["order_id", "user_id"],
                 name="create_order", kind="write")
    existing = {o["order_id"] for o in ROWS["orders"]}
    for seed in range(10):
        a = _args(tool, ROWS, seed, fresh_key=True)
        assert a["order_id"] not in existing and a["user_id"] in {"u1", "u2"}


def test_integer_ids_in_a_state_list_fit_a_string_list_parameter():
    rows = {"infos": [{"info_id": "i1", "event_ids": [1, 4]}], "events": [{"event_id": 1}, {"event_id": 4}]}
    tool = _tool({"event_ids": {"type": "array", "items": {"type": "string"}}}, ["event_ids"])
    assert _args(tool, rows, 0) == {"event_ids": ["1", "4"]}


def test_a_view_over_a_changed_table_indexes_only_that_table_and_answers_as_a_fresh_view():
    """StateView(base=...): the view after one write (quality's observation) shares the unchanged
    tables' column values with the seed's view and re-reads the table whose list is new."""
    rows = {"users": [{"user_id": f"u{i}", "name": f"Ann {i}", "address": {"city": f"C{i}"}} for i in range(5)],
            "orders": [{"order_id": i, "user_id": f"u{i % 5}", "status": "open"} for i in range(8)]}
    seed = _state(rows)
    after_rows = {**rows, "orders": [{"order_id": 3, "user_id": "u3", "status": "cancelled"}]}
    spec = DomainSpec(id="d", name="d", tools=[], tables=[
        TableSpec(name=t, primary_key=[next(iter(rs[0]))], columns=[
            ColumnSpec(name=c, type="json" if isinstance(v, dict) else "integer" if isinstance(v, int) else "text")
            for c, v in rs[0].items()]) for t, rs in rows.items()])
    shared = StateView(spec, rows=after_rows, base=seed)
    fresh = StateView(spec, rows=after_rows)
    for attr in ("columns", "nested", "name_words", "snake_columns"):
        assert getattr(shared, attr) == getattr(fresh, attr), attr
    assert shared.values_for("status") == ["cancelled"]
    assert shared.values_for("city") == [f"C{i}" for i in range(5)]
    assert shared._values[("users", "name")] is seed._values[("users", "name")]  # not indexed again
    assert shared._values[("orders", "status")] is not seed._values[("orders", "status")]
