"""The one chat template: the servers' renderer (jinja2, no transformers) gives exactly the text the
training tokenizer's apply_chat_template gives, for every message shape a trajectory holds."""

from __future__ import annotations

import pytest

from agentscaler.chat_template import CHAT_TEMPLATE, normalize_messages, render

TOOLS = [{"type": "function", "function": {"name": "get_user_details", "description": "A user's détails <b>&.",
                                           "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}},
                                                          "required": ["user_id"]}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "who is u1?"},
     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
         "name": "get_user_details", "arguments": '{"user_id": "u1", "z": [1, "é", {"b": 2, "a": 1}]}'}}]},
     {"role": "tool", "tool_call_id": "c1", "content": '{"name": "Ada"}'}, {"role": "tool", "content": "second"},
     {"role": "assistant", "content": "Ada.", "tool_calls": [
         {"id": "c2", "type": "function", "function": {"name": "get_user_details", "arguments": {"user_id": "u2"}}},
         {"id": "c3", "type": "function", "function": {"name": "get_user_details", "arguments": "not json"}}]},
     {"role": "tool", "content": ""}, {"role": "user", "content": [{"type": "text", "text": "thanks"}]}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "mid-conversation system"},
     {"role": "assistant", "content": "b"}],
]


@pytest.mark.parametrize("conv", CONVERSATIONS)
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_render_is_apply_chat_template(tokenizer, conv, tools):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    for gen in (True, False):
        expected = tokenizer.apply_chat_template(normalize_messages(conv), tools=tools, add_generation_prompt=gen,
                                                 tokenize=False)
        assert render(conv, tools, add_generation_prompt=gen) == expected


def test_normalize_messages_rejects_unknown_roles():
    with pytest.raises(ValueError, match="unsupported message"):
        normalize_messages([{"role": "wizard", "content": "x"}])
    assert normalize_messages([{"role": "assistant", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}])[0]["tool_calls"] == [
        {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
