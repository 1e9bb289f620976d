"""envs.fastcheck agrees with jsonschema on every schema it accepts, for any JSON arguments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
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
beyond_prop = st.one_of(  # beyond the flat subset: the checker must refuse these schemas (or agree anyway)
    st.fixed_dictionaries({"type": st.just("string"), "minLength": st.integers(0, 2)}),
    st.fixed_dictionaries({"enum": st.lists(json_scalar, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"type": st.just("array"), "items": st.just({"type": "integer"})}))
prop_schema = st.one_of(flat_prop, flat_prop, flat_prop, flat_prop, beyond_prop)
schemas = st.fixed_dictionaries(
    {"properties": st.dictionaries(names, prop_schema, max_size=4)},
    optional={"type": st.just("object"), "required": st.lists(names, max_size=3),
              "additionalProperties": st.one_of(st.booleans(), st.just({"type": "string"})),
              "title": st.just("parameters")})
schemas = st.one_of(schemas, schemas, schemas, st.fixed_dictionaries({"properties": st.just({}),
                                                                     "minProperties": st.just(1)}))


TRICKY = [0, 1, -1, 1.0, -2.0, 2.5, float("nan"), float("inf"), True, False, None, "", "x", "a", [], [1], {}, {"a": 1}]


@settings(max_examples=1500, deadline=None)
@given(data=st.data())
def test_flat_checker_agrees_with_jsonschema(data):
    schema = data.draw(schemas)
    check = flat_checker(schema)
    if check is None:
        return
    v = Draft202012Validator(schema)
    enum_values = [e for p in schema["properties"].values() for e in p.get("enum", [])]
    values = st.one_of(st.sampled_from(TRICKY + enum_values), json_value)
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
