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


def test_tags_versions_and_numbers_are_not_words_of_a_name() -> None:
    from agentscaler.naming import is_tag, name_tokens, strip_tag

    assert strip_tag("weather_forecast_90611a") == "weather_forecast"
    assert strip_tag("detailed_weather_forecast_aaeaef") == "detailed_weather_forecast"  # a tag without digits
    assert strip_tag("decade") == "decade" and not is_tag("facade") and is_tag("c4cd7e")
    assert name_tokens("Movies_3_FindMovies_v2_1955f3") == ("movies", "find", "movies")


def test_ids_and_the_nouns_they_name() -> None:
    from agentscaler.naming import CANONICAL, id_noun, is_id_name, plural, synonyms

    assert is_id_name("userId") and is_id_name("vec_id") and is_id_name("item_ids") and is_id_name("id")
    assert not is_id_name("paid") and not is_id_name("valid")
    assert id_noun("source_account_id") == "account" and id_noun("categoryIds") == "category" and id_noun("id") == ""
    assert plural("weather") == "weather" and plural("parking_session") == "parking_sessions"
    assert synonyms("booking", "reservation") and synonyms("cinema_ticket", "booking") and not synonyms("user", "order")
    assert CANONICAL["login"] == "session"
