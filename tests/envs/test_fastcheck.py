"""envs.fastcheck agrees with jsonschema on every schema it accepts, for any JSON arguments."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from envs.fastcheck import flat_checker

TYPES = ["string", "integer", "number", "boolean", "null", "array", "object"]
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
                        st.sampled_from([0.0, 1.0, -2.0, 1.5]), st.text(max_size=3))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                               st.dictionaries(st.text(max_size=2), inner, max_size=2)),
                          max_leaves=4)
names = st.sampled_from(["a", "b", "c", "d"])
flat_prop = st.one_of(
    st.fixed_dictionaries({}, optional={"type": st.one_of(st.sampled_from(TYPES),
                                                          st.lists(st.sampled_from(TYPES), min_size=1, max_size=3)),
                                        "description": st.text(max_size=5), "title": st.just("T")}),
    st.fixed_dictionaries({"enum": st.lists(st.text(max_size=2), min_size=1, max_size=3)},
                          optional={"type": st.just("string")}))
int_enum = st.fixed_dictionaries({"enum": st.lists(st.integers(-2, 2), min_size=1, max_size=3)},
                                 optional={"type": st.sampled_from(["integer", "number"]), "description": st.just("d")})
array_prop = st.fixed_dictionaries({"type": st.just("array"), "items": st.one_of(flat_prop, int_enum)},
                                   optional={"description": st.just("d"), "default": st.just([])})
object_prop = st.fixed_dictionaries(
    {"type": st.just("object"), "properties": st.dictionaries(names, st.one_of(flat_prop, int_enum, array_prop),
                                                              max_size=3)},
    optional={"required": st.lists(names, max_size=2), "additionalProperties": st.booleans(),
              "default": st.just({}), "description": st.just("d")})
nested_prop = st.one_of(int_enum, array_prop, object_prop)
beyond_prop = st.one_of(
    st.fixed_dictionaries({"items": st.just({"type": "integer"})}),  # items without type array
    st.fixed_dictionaries({"type": st.just(["array", "null"]), "items": st.just({"type": "integer"})}),
    st.fixed_dictionaries({"properties": st.just({"a": {"type": "integer"}}), "required": st.just(["a"])}),
    st.fixed_dictionaries({"type": st.just("object"), "additionalProperties": st.just({"type": "string"})}),
    st.fixed_dictionaries({"type": st.just("array"), "items": st.just({"type": "string", "minLength": 1})}),
    st.fixed_dictionaries({"type": st.just("string"), "enum": st.lists(st.integers(0, 2), min_size=1, max_size=2)}),
    st.fixed_dictionaries({"enum": st.lists(st.one_of(st.integers(0, 2), st.booleans()), min_size=1, max_size=3)}),
    st.fixed_dictionaries({"type": st.just("string"), "format": st.just("date")}),  # beyond the flat subset: the checker must refuse these schemas (or agree anyway)
    st.fixed_dictionaries({"type": st.just("string"), "minLength": st.integers(0, 2)}),
    st.fixed_dictionaries({"enum": st.lists(json_scalar, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"type": st.just("array"), "items": st.just({"type": "integer"})}))
prop_schema = st.one_of(flat_prop, flat_prop, flat_prop, flat_prop, nested_prop, nested_prop, beyond_prop)
schemas = st.fixed_dictionaries(
    {"properties": st.dictionaries(names, prop_schema, max_size=4)},
    optional={"type": st.just("object"), "required": st.lists(names, max_size=3),
              "additionalProperties": st.one_of(st.booleans(), st.just({"type": "string"})),
              "title": st.just("parameters")})
schemas = st.one_of(schemas, schemas, schemas, st.fixed_dictionaries({"properties": st.just({}),
                                                                     "minProperties": st.just(1)}))


def _walk(schema):
    """Every sub-schema of a schema (dicts), itself included."""
    yield schema
    for key in ("properties",):
        for sub in (schema.get(key) or {}).values() if isinstance(schema.get(key), dict) else ():
            yield from _walk(sub)
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"])


TRICKY = [0, 1, -1, 1.0, -2.0, 2.5, float("nan"), float("inf"), True, False, None, "", "x", "a", [], [1], {}, {"a": 1}]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_flat_checker_agrees_with_jsonschema(data):
    schema = data.draw(schemas)
    check = flat_checker(schema)
    if check is None:
        return
    v = Draft202012Validator(schema)
    enum_values = [e for p in _walk(schema) for e in p.get("enum", []) if isinstance(p, dict)]
    scalars = st.sampled_from(TRICKY + enum_values)
    values = st.recursive(st.one_of(scalars, json_value),
                          lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=3)),
                          max_leaves=4)
    for a in data.draw(st.lists(st.dictionaries(names, values, max_size=4), min_size=1, max_size=8)):
        assert check(a) == v.is_valid(a), (schema, a)


@pytest.mark.parametrize("extra", [True, False])
def test_every_type_and_value_exhaustively(extra):
    props = {f"p_{t}": {"type": t} for t in TYPES}
    props |= {"p_num_or_null": {"type": ["number", "null"]}, "p_enum": {"enum": ["x", "a"]}, "p_any": {}}
    schema = {"type": "object", "properties": props, "required": ["p_any"], "additionalProperties": extra}
    check, v = flat_checker(schema), Draft202012Validator(schema)
    assert check is not None
    for name in [*props, "unknown"]:
        for value in TRICKY:
            for args in ({name: value}, {name: value, "p_any": 0}):
                assert check(args) == v.is_valid(args), (name, value, args)


def test_subset_boundaries():
    flat = {"type": "object", "properties": {"n": {"type": "integer", "description": "d"},
                                             "s": {"enum": ["x", "y"]}}, "required": ["n"],
            "additionalProperties": False}
    check = flat_checker(flat)
    assert check is not None
    assert check({"n": 1}) and check({"n": 2.0, "s": "x"})
    assert not check({"n": True}) and not check({"s": "x"}) and not check({"n": 1, "z": 0}) and not check({"n": 1, "s": "q"})
    # anything the subset does not implement is left to jsonschema
    assert flat_checker({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}) is None
    assert flat_checker({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "$defs": {"N": {}}}) is None
    assert flat_checker({"type": "object", "additionalProperties": {"type": "string"}}) is None
    assert flat_checker({"type": "array"}) is None
    assert flat_checker({"properties": {"e": {"enum": [1, True]}}}) is None


def test_nested_subset_boundaries():
    """Lists and small objects of the flat subset, and integer enums, are checked here; a value
    they refuse is refused, and what lies beyond is still left to jsonschema."""
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "description": "d", "default": []},
        "who": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name"], "additionalProperties": False},
        "level": {"type": "integer", "enum": [1, 2, 7]}}, "required": ["level"]}
    check, v = flat_checker(schema), Draft202012Validator(schema)
    assert check is not None
    for args in ({"level": 1}, {"level": 2.0}, {"level": True}, {"level": 3}, {"level": "1"},
                 {"level": 1, "tags": ["a", "b"]}, {"level": 1, "tags": ["a", 1]}, {"level": 1, "tags": "a"},
                 {"level": 7, "who": {"name": "x", "age": 3}}, {"level": 7, "who": {"age": 3}},
                 {"level": 7, "who": {"name": "x", "age": 3.5}}, {"level": 7, "who": {"name": "x", "z": 1}},
                 {"level": 7, "who": ["name"]}):
        assert check(args) == v.is_valid(args), args
    assert not check({"level": True}) and not check({"level": 1, "tags": ["a", 1]}) and not check({"level": 7, "who": {}})
    for beyond in ({"type": "array", "items": {"type": "string", "minLength": 1}},  # a keyword beyond, inside
                   {"items": {"type": "string"}},  # items without the array type
                   {"type": "object", "properties": {"a": {}}, "minProperties": 1},
                   {"type": "object", "additionalProperties": {"type": "string"}},
                   {"enum": [1, True]}, {"type": "string", "enum": [1]}, {"type": "string", "format": "date"}):
        assert flat_checker({"type": "object", "properties": {"p": beyond}}) is None, beyond
