"""Intent writer: the user's values reach the agent; looked-up values are left to the agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.spec import DomainSpec
from tasks.scenarios.intents import check_intent, collect_user_facts, template_intent, write_intent
from tests.data.domains.shop.build import build_shop


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> DomainSpec:
    return DomainSpec.load(build_shop(tmp_path_factory.mktemp("shop")))


CALLS = [
    {"name": "get_user", "arguments": {"user_id": "u1"}, "kind": "read", "sources": {"user_id": "user"}},
    {"name": "place_order", "arguments": {"user_id": "u1", "product_id": "p3", "quantity": 2}, "kind": "write",
     "sources": {"user_id": "output", "product_id": "user", "quantity": "user"}},
    {"name": "cancel_order", "arguments": {"order_id": "o4"}, "kind": "write", "sources": {"order_id": "output"}},
]


def test_user_facts_hold_only_user_values() -> None:
    facts = collect_user_facts(CALLS)
    assert facts == {"user_id": "u1", "product_id": "p3", "quantity": 2}


def test_two_values_of_one_argument_keep_both() -> None:
    calls = [{"name": "get_user", "arguments": {"user_id": "u1"}, "sources": {"user_id": "user"}},
             {"name": "get_user", "arguments": {"user_id": "u2"}, "sources": {"user_id": "user"}}]
    assert collect_user_facts(calls) == {"user_id": "u1", "user_id_2": "u2"}


def test_template_mentions_every_user_value_and_not_lookups(spec: DomainSpec) -> None:
    facts = collect_user_facts(CALLS)
    text = template_intent(spec, CALLS, facts)
    for v in ("u1", "p3", "2"):
        assert v in text
    assert "o4" not in text  # the new order id comes from place_order's output
    assert "I'd like to make a change" in text and text.startswith("Hi, I need help with users and orders.")
    assert check_intent(text, {}, CALLS) == []  # the text alone is enough


def test_check_flags_a_missing_value(spec: DomainSpec) -> None:
    missing = check_intent("I want to buy a lamp.", {"user_id": "u1"}, CALLS)
    assert missing == ["call1.product_id=p3", "call1.quantity=2"]


def test_writer_falls_back_to_template_when_it_misses_facts(spec: DomainSpec) -> None:
    """Scripted writers (not an LLM): the test is about our fallback logic."""
    text, facts, missing = write_intent(spec, CALLS, writer=lambda s, c, f: "Buy me something nice.")
    assert missing == [] and "p3" in text and facts["product_id"] == "p3"
    good = "I'm user u1; please order 2 of product p3 and then cancel that order."
    text, _, missing = write_intent(spec, CALLS, writer=lambda s, c, f: good)
    assert text == good and missing == []

    def boom(s, c, f):
        raise RuntimeError("model down")

    text, _, missing = write_intent(spec, CALLS, writer=boom)
    assert "p3" in text and missing == []


def test_read_only_intent_asks_for_no_change(spec: DomainSpec) -> None:
    calls = CALLS[:1]
    text = template_intent(spec, calls, collect_user_facts(calls))
    assert text.startswith("Hi, I need help with users. I only want information; please don't change anything.")
    assert "u1" in text


@pytest.mark.llm
@pytest.mark.slow
def test_llm_writer_with_the_local_server(tmp_path: Path, local_llm: str) -> None:
    """The real local llama.cpp server (SmolLM2, the session's one server): each intent is the model's
    text when it names every user value, else the template's; either way the check passes."""
    from agentscaler.llm import LLMClient
    from agentscaler.workspace import read_jsonl
    from tasks.scenarios.build import build_scenarios
    from tasks.scenarios.intents import llm_intent_writer

    d = build_shop(tmp_path / "shop")
    client = LLMClient(local_llm)
    report = build_scenarios(d, "shop", per_domain=3, max_length=2, seed=0, intent_writer=llm_intent_writer(client))
    assert report["kept"] == 3
    for row in read_jsonl(d / "scenarios.jsonl"):
        calls = [{"name": c["name"], "arguments": c["arguments"]} for c in row["gold_calls"]]
        facts = {json.dumps(v) for v in row["user_facts"].values()}
        for c in calls:
            c["sources"] = {a: "user" if json.dumps(v) in facts else "output" for a, v in c["arguments"].items()}
        assert check_intent(row["intent"], {}, calls) == []


def test_a_configured_endpoint_writes_the_intents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A *scripted* endpoint (a real HTTP server, not a model) stands in for a configured model: it
    answers with the customer's values in a sentence. The endpoint is found through the one resolver
    (AGENTSCALER_LLM_URL); its text is kept when it passes the checks, the meta records who wrote it."""
    from agentscaler.workspace import read_jsonl
    from tasks.scenarios.build import build_scenarios
    from tests.chat_endpoint import ChatEndpoint

    def answer(body: dict) -> str:  # "I need a hand with <the customer's values>."
        prompt = body["messages"][-1]["content"]
        facts = json.loads(prompt.split("Values the customer knows: ")[1].split("\n")[0])
        return "I need a hand with " + ", ".join(v if isinstance(v, str) else json.dumps(v) for v in facts.values()) + "."

    endpoint = ChatEndpoint(answer)
    monkeypatch.setenv("AGENTSCALER_LLM_URL", endpoint.url)
    try:
        d = build_shop(tmp_path / "shop")
        report = build_scenarios(d, "shop", per_domain=4, max_length=2, seed=0)
    finally:
        endpoint.close()
    assert report["kept"] == 4
    rows = list(read_jsonl(d / "scenarios.jsonl"))
    assert all(r["intent"].startswith("I need a hand with") for r in rows)
    meta = json.loads((d / "scenarios.meta.json").read_text())
    assert meta["params"]["intents"] == "llm:smollm2-135m"
