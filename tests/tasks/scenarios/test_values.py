"""tasks.scenarios.values.valid: the fast check first, and the same answers as agentscaler.schemas.is_valid."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscaler.schemas import is_valid
from tasks.scenarios.values import valid
from tests.envs.test_fastcheck import json_value, prop_schema, schemas


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.one_of(prop_schema, schemas), value=json_value)
def test_valid_answers_as_is_valid(schema, value):
    assert valid(value, schema) == is_valid(value, schema)


def test_values_is_valid_refuses_before_any_schema_are_refused():
    """The fast check accepts any float as a number; NaN, the infinities and too-deep values are not JSON
    values any schema accepts (value_problem), as is_valid says."""
    for v in (float("nan"), float("inf"), -float("inf")):
        assert valid(v, {"type": "number"}) is False and is_valid(v, {"type": "number"}) is False
    assert valid({"x": float("nan")}, {"type": "object", "properties": {"x": {"type": "number"}}}) is False
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert valid(deep, {"type": "array"}) is False
    assert valid(1.5, {"type": "number"}) is True and valid("a", {"enum": ["a", "b"]}) is True
