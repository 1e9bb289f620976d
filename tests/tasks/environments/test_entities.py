"""One entity per real-world noun, across a domain (plan + entities + dedupe), on the issue's service
corpus and real-corpus shapes. Data only: nothing generated runs here (test_behaviour.py runs it)."""

from __future__ import annotations

from agentscaler.models import Tool
from agentscaler.naming import is_tag, name_tokens, strip_tag, synonyms
from tasks.environments.dedupe import merge_near_duplicates
from tasks.environments.rules import prepare_tools, synthesize_rules
from tasks.environments.verbs import VERBS, NOUNLIKE
from tests.tasks.environments.services import NAMES, service_tools


def T(name: str, desc: str, props: dict | None = None, req: list[str] | None = None) -> Tool:
    return Tool(name=name, source_name=name, source="t", description=desc,
                parameters={"type": "object", "properties": props or {}, "required": req or []}).with_id()


def test_the_cinema_has_one_booking_entity_and_the_showtime_owns_the_seats():
    syn = synthesize_rules("cinema", service_tools("cinema"))
    plans = syn.spec.report["plans"]
    assert plans["book_cinema_tickets"]["entity"] == plans["cancel_cinema_booking"]["entity"] == "booking"
    assert plans["book_cinema_tickets"]["action"] == "create" and plans["cancel_cinema_booking"]["action"] == "status"
    tables = {t.name: t for t in syn.spec.tables}
    assert set(tables) == {"bookings", "showtimes"}
    # the booking belongs to its showtime; the showtime never points back at a booking
    assert {c.name: c.foreign_key for c in tables["bookings"].columns if c.foreign_key} == \
        {"showtime_id": "showtimes.showtime_id"}
    assert not any(c.foreign_key for c in tables["showtimes"].columns)
    assert syn.spec.report["entities"]["showtime"]["quantity"] == "seats_available"


def test_parking_writes_are_writes_on_one_session_entity():
    syn = synthesize_rules("parking", service_tools("parking"))
    plans = syn.spec.report["plans"]
    for name in ("end_parking_session", "extend_parking_session", "start_parking_session"):
        assert plans[name]["kind"] == "write" and plans[name]["entity"] == "session"
    assert plans["end_parking_session"]["action"] == "status" and plans["extend_parking_session"]["action"] == "extend"
    assert syn.spec.report["entities"]["session"]["states"] == ["active", "ended"]


def test_synonyms_merge_a_referenced_word_into_the_created_one():
    syn = synthesize_rules("gym", service_tools("gym"))
    plans = syn.spec.report["plans"]
    assert plans["register_customer"]["entity"] == plans["get_member"]["entity"] == "member"  # customer = member
    assert plans["freeze_membership"]["entity"] == "member"
    assert syn.spec.report["entities"]["member"]["states"] == ["active", "frozen"]
    assert synonyms("cinema_ticket", "booking") and not synonyms("ticket", "user")


def test_table_and_domain_names_are_nouns_without_tags():
    for name in NAMES:
        syn = synthesize_rules(name, service_tools(name))
        for word in syn.spec.name.split("_") + [w for t in syn.spec.tables for w in t.name.split("_")]:
            assert not is_tag(word) and (word not in VERBS or VERBS[word] == "read" or word in NOUNLIKE), \
                (name, syn.spec.name, [t.name for t in syn.spec.tables])


def test_weather_copies_are_merged_as_aliases_and_names_lose_their_tags():
    loc = {"location": {"type": "string"}, "days": {"type": "integer"}}
    tools = [T("weather_forecast", "Retrieve the weather forecast for a location over a number of days.", loc),
             T("weather_forecast_90611a", "Retrieve the weather forecast for a location for a number of days.", loc),
             T("weather_forecast_c4cd7e", "Retrieve weather forecast for location over number of days.", loc),
             T("detailed_weather_forecast_aaeaef", "Provide a detailed weather forecast for a location.",
               {**loc, "include_hourly": {"type": "boolean"}}),
             T("get_air_quality", "Get the air quality index of a city.", {"city": {"type": "string"}})]
    kept, skipped, aliases, bad = prepare_tools(tools)
    assert aliases == {"weather_forecast_90611a": "weather_forecast", "weather_forecast_c4cd7e": "weather_forecast"}
    assert {t.name for t in kept} == {"weather_forecast", "detailed_weather_forecast_aaeaef", "get_air_quality"}
    syn = synthesize_rules("weather", tools)
    assert syn.spec.report["near_duplicates"]["merged"] == 2
    assert syn.skipped["weather_forecast_90611a"] == "near_duplicate_of:weather_forecast"
    assert {t.name for t in syn.spec.tables} == {"weather_forecasts", "air_qualities"}
    assert "aaeaef" not in syn.spec.name and strip_tag("detailed_weather_forecast_aaeaef") == "detailed_weather_forecast"
    assert name_tokens("Movies_3_FindMovies_1955f3") == ("movies", "find", "movies")


def test_different_tools_with_similar_names_are_not_merged():
    a = T("get_user", "Get a user's profile by id.", {"user_id": {"type": "string"}}, ["user_id"])
    b = T("get_users", "List every user of the workspace.", {"limit": {"type": "integer"}})
    kept, aliases = merge_near_duplicates([a, b], {"get_user": "read", "get_users": "read"})
    assert aliases == {} and len(kept) == 2


def test_bad_input_gets_a_documented_default_and_is_counted_by_reason():
    tools = [T("mystery", ""),  # no description, no verb
             T("book_room", "Book a room.", {"room_id": {"type": "string"}, "nights": {"type": "integer",
                                                                                     "minimum": 9, "maximum": 2,
                                                                                     "default": "x"},
                                           "size": {"type": "integer", "enum": ["s", 2]}}, ["room_id", "guest"]),
             Tool(name="odd", source_name="odd", source="t", description="Set a flag.",
                  parameters={"type": "object", "properties": {"flag": "yes"}}).with_id()]
    syn = synthesize_rules("bad", tools)
    bad = syn.spec.report["bad_input"]
    assert bad["no_description"] == ["mystery"] and bad["no_verb"] == ["mystery"]
    assert bad["required_not_in_properties"] == ["book_room"] and bad["min_above_max"] == ["book_room"]
    assert bad["invalid_default"] == ["book_room"] and bad["enum_type_mismatch"] == ["book_room"]
    assert bad["param_not_object"] == ["odd"]
    book = syn.spec.tool("book_room").parameters
    assert book["required"] == ["room_id"] and book["properties"]["nights"]["minimum"] == 2
    assert book["properties"]["size"]["enum"] == [2] and "default" not in book["properties"]["nights"]
    assert syn.spec.tool("mystery").kind == "read" and syn.spec.tool("mystery").description == "Mystery"
