"""Intents: the user's goal in natural language, with the facts a user knows kept apart.

A scenario's gold calls take each argument from one of three places: the user (values sampled
from the database state or from the schema: the user's id, an order number, a new email),
an earlier call's output (the agent must look it up), or nothing else. Only the first kind
must reach the agent through the user, so the intent (or `user_facts`) must mention every
user-provided value; `check_intent` enforces that for any writer.

The template writer is the embedded default (fast, deterministic, no model): plain English from
the domain's nouns and the API's own words, never tool names or slugs; a read-only request says
it wants no change and asks for none. An LLM writer (`llm_intent_writer(client)`, or
`configured_writer()` when a model endpoint is configured) rewrites the goal in a user's voice,
and falls back to the template when its text misses a fact, is not plain, asks a read-only
scenario for a change, or the model fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from agentscaler.endpoints import LOCAL, resolve
from agentscaler.llm import LLMClient
from agentscaler.naming import plural, singular, snake
from agentscaler.settings import Settings
from envs.spec import DomainSpec

# A writer takes (spec, calls, user_facts) and returns the intent text. `calls` are dicts
# {"name", "arguments", "kind", "sources": {arg: "user" | "output"}}.
IntentWriter = Callable[[DomainSpec, list[dict[str, Any]], dict[str, Any]], str]


def fact_text(value: Any) -> str:
    """How a value is written in an intent: strings as is, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _label(arg: str) -> str:
    """A parameter name as words: showDate -> show date, user_id -> user id."""
    return snake(arg).replace("_", " ").strip() or arg


_IDENTIFIER = re.compile(r"\b[A-Za-z]+_[A-Za-z0-9_]+\b|\b[a-z]+[A-Z][A-Za-z]*\b|\b[0-9a-f]{6}\b|`")
# words that ask for a change: a read-only request never contains them outside "change nothing"
_CHANGE = re.compile(r"\b(cancel|delete|remove|book|buy|purchase|create|add|update|modify|edit|end|stop|start|extend|"
                     r"renew|transfer|pay|order|reserve|register|send|post|set|change|close|open|approve|reject|"
                     r"return|refill|refund|withdraw|deposit|enroll|borrow|rent|schedule|reschedule|upload|"
                     r"archive|lock|unlock|enable|disable|activate|deactivate|suspend|resume|freeze|unfreeze|"
                     r"log in|log out|login|logout|sign)\b", re.I)
_NO_CHANGE = re.compile(r"(please )?(don't|do not) change anything|change nothing|without changing anything", re.I)


def plain(text: str, values: Any = ()) -> bool:
    """Plain English for a user: no snake_case or camelCase identifiers, tags or code marks (the
    user's own values, such as an order id `ord_3`, aside)."""
    for v in sorted((fact_text(x) for x in values), key=len, reverse=True):
        if v:
            text = text.replace(v, " ")
    return not _IDENTIFIER.search(text)


def asks_for_change(text: str) -> bool:
    """Whether a request asks for a change (the words that promise none aside)."""
    return bool(_CHANGE.search(_NO_CHANGE.sub(" ", text)))


def _clause(description: str, name: str) -> str:
    """A tool description as an imperative clause: 'Get a user's profile by user id.' -> 'get a user's profile by user id'."""
    text = re.sub(r"^.*?Tool description:\s*", "", (description or "").strip(), flags=re.S)
    text = text.split("\n")[0].strip()
    text = re.split(r"(?<=[a-z0-9)])\.\s", text, maxsplit=1)[0]
    if not text:
        text = _label(name)
    text = re.sub(r"[.\s]+$", "", text)
    if len(text) > 140:
        text = text[:140].rsplit(" ", 1)[0]
    return text[:1].lower() + text[1:]


def _thing(spec: DomainSpec, name: str) -> str:
    """The noun a call is about, as words (the synthesizer's entity, else the first table's)."""
    plan = ((spec.report or {}).get("plans") or {}).get(name) or {}
    noun = str(plan.get("entity") or "")
    if not noun and spec.tables:  # no plan: the table the tool is named after, else the first
        tool = snake(name)
        named = [singular(t.name) for t in spec.tables if singular(t.name) in tool]
        noun = max(named, key=len) if named else singular(spec.tables[0].name)
    return noun.replace("_", " ") or "record"


def topic(spec: DomainSpec, calls: list[dict[str, Any]]) -> str:
    """What the request is about, in words ("bookings", "parking sessions")."""
    nouns = list(dict.fromkeys(_thing(spec, c["name"]) for c in calls))
    return " and ".join(plural(n.split(" ")[-1]) if len(n.split(" ")) == 1 else
                        " ".join(n.split(" ")[:-1] + [plural(n.split(" ")[-1])]) for n in nouns[:2])


def _step(spec: DomainSpec, call: dict[str, Any]) -> str:
    """One call as a request clause: the API's own words when they are plain (and, for a read,
    ask for no change), else the action and its noun."""
    try:
        tool = spec.tool(call["name"])
        desc = tool.description
    except KeyError:
        desc = ""
    clause = _clause(desc, call["name"])
    thing = _thing(spec, call["name"])
    read = call.get("kind") == "read"
    if plain(clause) and not (read and asks_for_change(clause)) and call["name"].lower() not in clause.lower():
        return clause
    if read:
        return f"look up the {thing}"
    plan = ((spec.report or {}).get("plans") or {}).get(call["name"]) or {}
    verb = str(plan.get("verb") or "update")
    return f"{verb.replace('_', ' ')} the {thing}"


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
    """One sentence per call, in order, with the user's values inline and lookups left to the agent.

    Plain English from the domain's nouns and the API's own words: no tool names, slugs or tags;
    a read-only request says it wants no change and asks for none."""
    steps: list[str] = []
    for call in calls:
        clause = _step(spec, call)
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
    head = f"Hi, I need help with {topic(spec, calls)}. " + (
        "I'd like to make a change. " if writes else "I only want information; please don't change anything. ")
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
        # An LLM's text must mention the user's values itself (checked against the text alone), be
        # plain English, and ask for no change when the scenario only reads.
        read_only = all(c.get("kind") == "read" for c in calls)
        if text and not check_intent(text, {}, calls) and plain(text, facts.values()) and \
                not (read_only and asks_for_change(text)):
            return text, facts, []
    text = template_intent(spec, calls, facts)
    return text, facts, check_intent(text, facts, calls)


def configured_writer(llm: str | None = None) -> tuple[IntentWriter | None, str]:
    """(writer, name): the LLM writer when a model endpoint is configured (`llm`, else
    AGENTSCALER_LLM_URL: agentscaler.endpoints), else (None, "template"). The local SmolLM2 server is
    never started for intents: its text rarely names every value, so the template would win anyway."""
    value = resolve(llm)
    if value == LOCAL:
        return None, "template"
    model = Settings.from_env().llm_model
    client = LLMClient([u.strip() for u in value.split(",") if u.strip()], model=model, timeout=60)
    return llm_intent_writer(client), f"llm:{model}"


def llm_intent_writer(client: LLMClient, max_tokens: int = 200) -> IntentWriter:
    """A writer that asks the configured LLM for the goal in a user's voice (sync, one call per scenario)."""

    def write(spec: DomainSpec, calls: list[dict[str, Any]], facts: dict[str, Any]) -> str:
        steps = "\n".join(
            f"- {_step(spec, c)}"
            + "".join(f"; {a}={fact_text(v)}" for a, v in c["arguments"].items() if c.get("sources", {}).get(a, "user") == "user")
            for c in calls)
        read_only = all(c.get("kind") == "read" for c in calls)
        messages = [
            {"role": "system", "content": "You write the request a customer makes to a support agent. First person, "
                                          "two or three sentences of plain English: no tool or function names, no "
                                          "identifiers with underscores. Mention every given value exactly."
                                          + (" The customer only wants information: ask for no change." if read_only
                                             else "")},
            {"role": "user", "content": f"Service: {topic(spec, calls)}.\nSteps the agent will take:\n{steps}\n"
                                        f"Values the customer knows: {json.dumps(facts, ensure_ascii=False)}\nWrite the request."},
        ]
        reply = client.chat_sync(messages, temperature=0.0, max_tokens=max_tokens, stage="intent")
        return (reply.content or "").strip()

    return write
