"""The one home of naming rules: discovery and synthesis read names the same way."""

from __future__ import annotations

import pytest

from agentscaler.models import Tool
from agentscaler.naming import column_key, plural, singular, snake, strip_role
from tasks.discover.graph import output_keys
from tasks.environments.plan import plan_tools


@pytest.mark.parametrize("word, one", [("orders", "order"), ("categories", "category"), ("boxes", "box"),
                                       ("matches", "match"), ("addresses", "address"), ("status", "status"),
                                       ("bus", "bus"), ("analysis", "analysis"), ("user", "user")])
def test_singular(word: str, one: str) -> None:
    assert singular(word) == one


def test_plural_inverts_singular_for_entity_names() -> None:
    for word in ("order", "category", "box", "match", "address", "status", "flight"):
        assert singular(plural(word)) == word


def test_snake_and_column_key() -> None:
    assert snake("userId") == "user_id" and snake("Order-Items.v2") == "order_items_v2" and snake("$") == ""
    assert column_key("max_price") == "price" and column_key("userId") == "user_id"
    assert column_key("order_ids") == "order_id" and column_key("start_date") == "date"
    assert strip_role("source_account") == "account" and strip_role("to_") == "to_"


def test_discovery_and_synthesis_agree_on_an_entity_named_like_a_plural() -> None:
    """A list of statuses is keyed status_id by discovery (it used to say statu_id), and synthesis
    makes the same entity of a status_id parameter."""
    lister = Tool(name="list_statuses", source_name="list_statuses", source="openai", description="List statuses.",
                  parameters={"type": "object", "properties": {}},
                  returns={"type": "object", "properties": {"statuses": {"type": "array"}}})
    assert "status_id" in output_keys(lister)
    getter = Tool(name="get_status", source_name="get_status", source="openai", description="Get one status.",
                  parameters={"type": "object", "properties": {"status_id": {"type": "string"}},
                              "required": ["status_id"]})
    plans, entities = plan_tools([getter])
    assert plans[0].entity == "status" and "status" in entities
