"""The LLM synthesizer held to the rules' entity and verb contract, end to end through the real client.

The model is a *scripted* OpenAI-compatible endpoint (a real HTTP server in this test that answers
each request with the next recorded reply): the replies have the shape a capable model gives (JSON
schemas, one fenced code block, JSON rows), and two of them make the mistakes such a model makes
(a schema that breaks the plan, a search that finds nothing). The test is about our loop: plan ->
schema -> code -> validation -> repair, with the feedback it sends. The generated code runs only in
the sandbox (validation), never in this process.
"""

from __future__ import annotations

import asyncio
import json

from agentscaler.llm import LLMClient
from envs.sandbox import unsafe_from_env
from tasks.environments.llm import synthesize_llm
from tests.chat_endpoint import ChatEndpoint
from tests.tasks.environments.services import service_record, service_tools

UNSAFE = unsafe_from_env()


def _tables(bookings: str = "bookings", cancel_kind: str = "write") -> str:
    return json.dumps({
        "tables": [
            {"name": "showtimes", "primary_key": ["showtime_id"], "columns": [
                {"name": "showtime_id", "type": "text", "nullable": False},
                {"name": "movie_title", "type": "text"}, {"name": "date", "type": "text"},
                {"name": "seats_available", "type": "integer"}]},
            {"name": bookings, "primary_key": ["booking_id"], "columns": [
                {"name": "booking_id", "type": "text", "nullable": False},
                {"name": "showtime_id", "type": "text", "foreign_key": "showtimes.showtime_id"},
                {"name": "quantity", "type": "integer"}, {"name": "customer_name", "type": "text"},
                {"name": "status", "type": "text"}]}],
        "tools": [{"name": "search_showtimes", "kind": "read"}, {"name": "get_showtime", "kind": "read"},
                  {"name": "book_cinema_tickets", "kind": "write"}, {"name": "get_booking", "kind": "read"},
                  {"name": "cancel_cinema_booking", "kind": cancel_kind}]})


CODE = '''```python
from envs.toolkit import ToolError


def search_showtimes(db, movie_title=None, date=None):
    rows = db.select("showtimes", order_by="showtime_id")
    if movie_title is not None:
        rows = [r for r in rows if movie_title.lower() in (r["movie_title"] or "").lower()]
    rows = [r for r in rows if MATCH]
    return rows


def get_showtime(db, showtime_id):
    row = db.get("showtimes", showtime_id=showtime_id)
    if row is None:
        raise ToolError(f"showtime {showtime_id} not found")
    return row


def book_cinema_tickets(db, showtime_id, quantity, customer_name=None):
    show = get_showtime(db, showtime_id)
    if quantity <= 0:
        raise ToolError("quantity must be positive")
    if show["seats_available"] < quantity:
        raise ToolError(f"not enough seats on {showtime_id}: {show['seats_available']} left, {quantity} requested")
    db.update("showtimes", {"showtime_id": showtime_id}, {"seats_available": show["seats_available"] - quantity})
    return db.insert("bookings", {"booking_id": db.new_id("bookings", "bk"), "showtime_id": showtime_id,
                                  "quantity": quantity, "customer_name": customer_name, "status": "active"})


def get_booking(db, booking_id):
    row = db.get("bookings", booking_id=booking_id)
    if row is None:
        raise ToolError(f"booking {booking_id} not found")
    return row


def cancel_cinema_booking(db, booking_id):
    row = get_booking(db, booking_id)
    if row["status"] != "active":
        raise ToolError(f"booking {booking_id} is {row['status']}: only an active booking can be cancelled")
    show = get_showtime(db, row["showtime_id"])
    db.update("showtimes", {"showtime_id": show["showtime_id"]},
              {"seats_available": show["seats_available"] + row["quantity"]})
    db.update("bookings", {"booking_id": booking_id}, {"status": "cancelled"})
    return get_booking(db, booking_id)
```'''
ROWS = json.dumps({"rows": {
    "showtimes": [{"showtime_id": f"st{i}", "movie_title": t, "date": d, "seats_available": n}
                  for i, (t, d, n) in enumerate([("Dune", "2024-05-20", 40), ("Alien", "2024-05-21", 12),
                                                 ("Heat", "2024-05-22", 0), ("Up", "2024-05-23", 7)], 1)],
    "bookings": [{"booking_id": f"bk{i}", "showtime_id": f"st{s}", "quantity": q, "customer_name": c, "status": st}
                 for i, (s, q, c, st) in enumerate([(1, 2, "Ada", "active"), (2, 1, "Alan", "cancelled"),
                                                    (1, 3, "Grace", "active"), (4, 2, "Linus", "active")], 1)]}})


def test_plan_schema_code_validation_repair_end_to_end():
    replies = [_tables("cancel_bookings", cancel_kind="read"),  # breaks the plan: a verb for a table, a write as read
               _tables(), CODE.replace("MATCH", 'r["date"] == (date or "")[:7]'),  # a date filter that finds nothing
               ROWS, CODE.replace("MATCH", 'date is None or r["date"] == date')]
    endpoint = ChatEndpoint(replies)
    client = LLMClient(endpoint.url, timeout=10, max_retries=0)
    try:
        syn = synthesize_llm("cinema", service_tools("cinema"), record=service_record("cinema"), client=client,
                             unsafe=UNSAFE)
    finally:
        asyncio.run(client.aclose())
        endpoint.close()
    rep = syn.spec.report["synth_llm"]
    assert syn.spec.synthesizer == "llm" and rep["status"] == "ok" and rep["rounds"] == 3, rep["errors"]
    assert rep["plan"]["entities"] == {"booking": "bookings", "showtime": "showtimes"}
    assert rep["plan"]["kinds"]["cancel_cinema_booking"] == "write"
    # round 1: the schema broke the plan, and the repair request said how
    assert rep["errors"][0]["step"] == "tables" and "table bookings (entity booking" in rep["errors"][0]["error"]
    assert "'cancel_bookings' is not a noun" in rep["errors"][0]["error"]
    assert "cancel_cinema_booking is a write" in rep["errors"][0]["error"]
    repair = endpoint.requests[1]["messages"][-1]["content"]
    assert "breaks the plan" in repair and "cancel_bookings" in repair
    # the plan reached the prompts: entities in the schema request, semantics in the code request
    assert "bookings: key booking_id" in endpoint.requests[0]["messages"][1]["content"]
    code_prompt = endpoint.requests[2]["messages"][1]["content"]
    assert "takes seats_available of the showtime given by showtime_id" in code_prompt
    assert "moves status from ['active'] to 'cancelled'" in code_prompt
    # round 2: validation in the sandbox found the empty search and sent it back
    assert rep["errors"][1]["step"] == "validate"
    assert "search_showtimes (read): empty_result: a search that finds nothing" in rep["errors"][1]["error"]
    assert "empty_result" in endpoint.requests[4]["messages"][-1]["content"]
    # round 3 passes the same quality bar as the rules
    v = rep["validation"]
    assert v["execute_rate"] == 1.0 and v["quality"]["id_coherence"] == 1.0
    assert v["quality"]["write_observability"] == 1.0
    assert syn.spec.report["plans"]["book_cinema_tickets"]["table"] == "bookings"
    assert rep["llm_calls"] == 5 and rep["prompt_tokens"] == 4500


def test_fallback_to_the_rules_keeps_the_recorded_reason():
    endpoint = ChatEndpoint([_tables("cancel_bookings")] * 2)
    client = LLMClient(endpoint.url, timeout=10, max_retries=0)
    try:
        syn = synthesize_llm("cinema", service_tools("cinema"), record=service_record("cinema"), client=client,
                             unsafe=UNSAFE, config={"max_rounds": 2})
    finally:
        asyncio.run(client.aclose())
        endpoint.close()
    assert syn.spec.synthesizer == "rules" and syn.spec.report["fallback"] == "rules"
    assert "no valid environment after 2 rounds" in syn.spec.report["fallback_reason"]
    assert "breaks the plan" in syn.spec.report["fallback_reason"]
    assert syn.spec.report["plans"]["cancel_cinema_booking"]["entity"] == "booking"  # the rules' environment
