"""Simulated users. The scripted user is our own logic (no LLM); the LLM user's prompt view is
checked here without a model (the real model plays it in tests/tasks/rollouts/test_engine.py)."""

from __future__ import annotations

import asyncio

from agentscaler.models import GoldCall, Scenario
from tasks.rollouts.users import NUDGE, STOP, LLMUser, ScriptedUser, read_goal_values, reply_has_values


def _scenario(**kw) -> Scenario:
    base = dict(id="s1", domain="shop", read_only=True, intent="Show me my latest order.",
                user_facts={"user_id": "u1", "email": "ada@example.com"},
                gold_calls=[GoldCall(name="get_order", arguments={"order_id": "o1"}, kind="read",
                                     output={"order_id": "o1", "status": "placed", "total": 17.0, "user_id": "u1"})],
                gold_hash="h", seed_hash="h")
    base.update(kw)
    return Scenario(**base)


def test_scripted_user_answers_from_facts_and_stops() -> None:
    async def go() -> None:
        u = ScriptedUser(_scenario(), patience=4)
        first = await u.first()
        assert first.text == "Show me my latest order." and not first.stop
        t = await u.respond([{"role": "assistant", "content": "Could you give me your user ID?"}])
        assert "u1" in t.text and "ada@" not in t.text and not t.stop
        t = await u.respond([{"role": "assistant", "content": "And anything else?"}])
        assert "ada@example.com" in t.text  # an open question: the facts not given yet
        t = await u.respond([{"role": "assistant", "content": "Working on it."}])
        assert not t.stop and "go ahead" in t.text
        t = await u.respond([{"role": "assistant", "content": "x"}])  # past patience
        assert t.stop and STOP in t.text
        u2 = ScriptedUser(_scenario())
        await u2.first()
        assert (await u2.respond([], goal_reached=True)).stop
        assert (await u2.nudge([])).text == NUDGE
    asyncio.run(go())


def test_facts_in_the_intent_count_as_given() -> None:
    u = ScriptedUser(_scenario(intent="Show order o1 of user u1."))
    assert u.revealed == {"user_id"}


def test_read_goal_values() -> None:
    s = _scenario()
    vals = read_goal_values(s)
    assert "o1" in vals and "u1" not in vals  # the user's own facts are not evidence of an answer
    assert reply_has_values("Order O1 is PLACED, total 17.00 (placed).", vals)
    assert not reply_has_values("I could not find it.", vals)
    assert not reply_has_values(None, vals)


def test_llm_user_sees_no_tools_and_roles_are_flipped() -> None:
    u = LLMUser(_scenario(), client=None, trial=1)  # type: ignore[arg-type] - view() needs no client
    msgs = [{"role": "system", "content": "agent prompt"}, {"role": "user", "content": "hi, my order?"},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                  "function": {"name": "get_order", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "{\"secret\": 1}"},
            {"role": "assistant", "content": "It is placed."}]
    view = u.view(msgs)
    assert view[0]["role"] == "system" and "Show me my latest order." in view[0]["content"] and STOP in view[0]["content"]
    assert [m["role"] for m in view[1:]] == ["user", "assistant", "user"]
    assert view[2]["content"] == "hi, my order?" and view[3]["content"] == "It is placed."
    assert "secret" not in str(view) and "get_order" not in str(view) and "agent prompt" not in str(view)
