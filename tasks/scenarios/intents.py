"""Intents: the user's goal in natural language, with the facts a user knows kept apart.

A scenario's gold calls take each argument from one of three places: the user (values sampled
from the database state or from the schema: the user's id, an order number, a new email),
an earlier call's output (the agent must look it up), or nothing else. Only the first kind
must reach the agent through the user, so the intent (or `user_facts`) must mention every
user-provided value; `check_intent` enforces that for any writer.

The template writer is the embedded default (fast, deterministic, no model). An LLM writer
(`llm_intent_writer(client)`) rewrites the goal in a user's voice when one is configured, and
falls back to the template when its text misses a fact or the model fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from envs.spec import DomainSpec

if TYPE_CHECKING:  # the LLM client is optional: only its type is needed here
    from agentscaler.llm import LLMClient

# A writer takes (spec, calls, user_facts) and returns the intent text. `calls` are dicts
# {"name", "arguments", "kind", "sources": {arg: "user" | "output"}}.
IntentWriter = Callable[[DomainSpec, list[dict[str, Any]], dict[str, Any]], str]


def fact_text(value: Any) -> str:
    """How a value is written in an intent: strings as is, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _label(arg: str) -> str:
    return arg.replace("_", " ").strip()


def _clause(description: str, name: str) -> str:
    """A tool description as an imperative clause: 'Get a user's profile by user id.' -> 'get a user's profile by user id'."""
    text = (description or "").strip().split("\n")[0].strip()
    if not text:
        text = _label(name)
    text = re.sub(r"[.\s]+$", "", text)
    return text[:1].lower() + text[1:]


def collect_user_facts(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The user-provided argument values of the gold calls, keyed by argument name.

    Two different values for one name get distinct keys (`user_id`, `user_id_2`), so no fact
    overwrites another.
    """
    facts: dict[str, Any] = {}
    for call in calls:
        for arg, value in call["arguments"].items():
            if call.get("sources", {}).get(arg, "user") != "user":
                continue
            if any(v == value and (k == arg or k.startswith(arg + "_")) for k, v in facts.items()):
                continue
            key, n = arg, 2
            while key in facts:
                key, n = f"{arg}_{n}", n + 1
            facts[key] = value
    return facts


def template_intent(spec: DomainSpec, calls: list[dict[str, Any]], user_facts: dict[str, Any]) -> str:
    """One sentence per call, in order, with the user's values inline and lookups left to the agent."""
    steps: list[str] = []
    for call in calls:
        try:
            desc = spec.tool(call["name"]).description
        except KeyError:
            desc = ""
        clause = _clause(desc, call["name"])
        given = [f"{_label(a)} {fact_text(v)}" for a, v in call["arguments"].items()
                 if call.get("sources", {}).get(a, "user") == "user"]
        looked_up = [_label(a) for a in call["arguments"] if call.get("sources", {}).get(a) == "output"]
        extra = []
        if given:
            extra.append("with " + ", ".join(given))
        if looked_up:
            extra.append("using the " + ", ".join(looked_up) + " found in the previous steps")
        steps.append(clause + (" (" + "; ".join(extra) + ")" if extra else ""))
    writes = any(c.get("kind") == "write" for c in calls)
    where = f" with {spec.name}" if spec.name else ""
    head = f"I need help{where}. " + ("Please make a change for me. " if writes else "I only want information; please change nothing. ")
    if len(steps) == 1:
        body = f"I want to {steps[0]}."
    else:
        body = " ".join(f"{'First' if i == 0 else 'Finally' if i == len(steps) - 1 else 'Then'}, {s}."
                        for i, s in enumerate(steps))
    tail = ""
    if user_facts:
        tail = " Details I can give: " + "; ".join(f"{_label(k)}: {fact_text(v)}" for k, v in user_facts.items()) + "."
    return head + body + tail


def check_intent(intent: str, user_facts: dict[str, Any], calls: list[dict[str, Any]]) -> list[str]:
    """Which user-provided argument values the user could not tell the agent.

    Returns "call#i.arg=value" for every user-sourced value found neither in the intent text
    (case-insensitive) nor among the user_facts values. Values from earlier outputs need not appear.
    """
    text = intent.lower()
    known = {fact_text(v).lower() for v in user_facts.values()}
    missing: list[str] = []
    for i, call in enumerate(calls):
        for arg, value in call["arguments"].items():
            if call.get("sources", {}).get(arg, "user") != "user":
                continue
            s = fact_text(value).lower()
            if s not in text and s not in known:
                missing.append(f"call{i}.{arg}={fact_text(value)}")
    return missing


def write_intent(spec: DomainSpec, calls: list[dict[str, Any]],
                 writer: IntentWriter | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """(intent, user_facts, missing): the writer's text when it passes the check, else the template's."""
    facts = collect_user_facts(calls)
    if writer is not None:
        try:
            text = writer(spec, calls, facts)
        except Exception:  # noqa: BLE001 - a failing model falls back to the template, never drops the scenario
            text = ""
        # An LLM's text must mention the user's values itself: checked against the text alone.
        if text and not check_intent(text, {}, calls):
            return text, facts, []
    text = template_intent(spec, calls, facts)
    return text, facts, check_intent(text, facts, calls)


def llm_intent_writer(client: "LLMClient", max_tokens: int = 200) -> IntentWriter:
    """A writer that asks the configured LLM for the goal in a user's voice (sync, one call per scenario)."""

    def write(spec: DomainSpec, calls: list[dict[str, Any]], facts: dict[str, Any]) -> str:
        steps = "\n".join(
            f"- {c['name']}: {_clause(spec.tool(c['name']).description, c['name'])}"
            + "".join(f"; {a}={fact_text(v)}" for a, v in c["arguments"].items() if c.get("sources", {}).get(a, "user") == "user")
            for c in calls)
        messages = [
            {"role": "system", "content": "You write the request a customer makes to a support agent. "
                                          "First person, two or three sentences, no tool names. Mention every given value exactly."},
            {"role": "user", "content": f"Service: {spec.name}. {spec.description}\nSteps the agent will take:\n{steps}\n"
                                        f"Values the customer knows: {json.dumps(facts, ensure_ascii=False)}\nWrite the request."},
        ]
        reply = client.chat_sync(messages, temperature=0.0, max_tokens=max_tokens, stage="intent")
        return (reply.content or "").strip()

    return write
