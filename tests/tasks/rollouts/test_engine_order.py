"""The order conversations start in: grouped by domain, one at a time against a one-slot server, so the
server's prompt cache keeps serving a domain's system prompt and tools (our own scheduling logic)."""

from __future__ import annotations

from agentscaler.llm import LLMClient
from tasks.rollouts.engine import by_domain, in_flight_limit, lanes
from tests.tasks.rollouts.test_rejection import _scenario


def test_conversations_start_grouped_by_domain():
    order = [_scenario(s, d, 1) for s, d in (("1", "x"), ("2", "y"), ("3", "x"), ("4", "z"), ("5", "y"))]
    assert [s.id for s in by_domain(order)] == ["1", "3", "2", "5", "4"]


def test_one_conversation_at_a_time_against_one_slot():
    assert in_flight_limit(LLMClient("http://127.0.0.1:9/v1", concurrency=1)) == 1
    assert in_flight_limit(LLMClient(["http://a/v1", "http://b/v1"], concurrency=4)) == 16


def test_one_conversation_per_single_slot_server_each_on_its_lane():
    two = LLMClient(["http://a/v1", "http://b/v1"], concurrency=1)
    assert in_flight_limit(two) == 2 and lanes(two) == ["http://a/v1", "http://b/v1"]
    assert lanes(LLMClient(["http://a/v1", "http://b/v1"], concurrency=4)) is None
