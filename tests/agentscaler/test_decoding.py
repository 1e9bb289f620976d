"""agentscaler.decoding: the tool-call grammar in llama.cpp's engine, the lazy trigger at `<tool_call>`,
and the sampler over logits from any runtime. Real llama.cpp samplers and the real SmolLM2 vocabulary
(a vocabulary-only load); the "model" here is scripted (ScriptedRuntime) because these tests are about
our decoding logic, not about what a model writes."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from agentscaler.decoding import Sampler, Sampling, call_schema, chat_response, common_prefix, complete, \
    inline_refs, tool_calls_grammar
from agentscaler.llm import parse_hermes_tool_calls
from agentscaler.schemas import check

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")

TOOLS = [
    {"type": "function", "function": {"name": "get_user_details", "description": "A user's details.",
                                      "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}},
                                                     "required": ["user_id"]}}},
    {"type": "function", "function": {"name": "cancel_order", "description": "Cancel an order.", "parameters": {
        "type": "object", "properties": {
            "order_id": {"type": "string"}, "reason": {"type": "string", "enum": ["no longer needed", "mistake"]},
            "items": {"type": "array", "items": {"type": "integer"}},
            "refund": {"type": "object", "properties": {"method": {"type": "string"}, "amount": {"type": "number"}},
                       "required": ["method"]},
            "notify": {"type": "boolean"}},
        "required": ["order_id", "reason"]}}},
    {"type": "function", "function": {"name": "list_stores", "description": "No arguments.",
                                      "parameters": {"type": "object", "properties": {}}}},
]


@pytest.fixture(scope="module")
def vocab():
    from llama_cpp import Llama

    from agentscaler.llm_server import default_model_path

    llama = Llama(str(default_model_path()), vocab_only=True, verbose=False)
    yield llama
    llama.close()


class ScriptedRuntime:
    """A scripted "model" over the real SmolLM2 vocabulary: it wants to write the first of `scripts`
    that the reply so far is a prefix of, and favours that script's next token (else end of turn)."""

    def __init__(self, llama, prompt: str, scripts: list[str]):
        self.llama, self.prompt, self.scripts = llama, prompt, scripts
        self.vocab_model, self.n_vocab, self.last_evaluated = llama._model, llama.n_vocab(), 0
        self.n_prompt = len(self.tokenize(prompt))
        self.calls = 0

    def tokenize(self, text: str) -> list[int]:
        return self.llama.tokenize(text.encode(), add_bos=False, special=True)

    def detokenize(self, tokens: list[int], prompt: list[int]) -> str:
        return self.llama.detokenize(tokens, prev_tokens=prompt).decode("utf-8", errors="ignore")

    def n_ctx(self) -> int:
        return 4096

    def logits(self, tokens: list[int]) -> np.ndarray:
        self.calls += 1
        self.last_evaluated = 1
        text = self.detokenize(tokens[self.n_prompt:], tokens[:self.n_prompt])
        out = np.zeros(self.n_vocab, dtype=np.float32)
        for script in self.scripts:
            if script.startswith(text):
                rest = script[len(text):]
                out[self.tokenize(rest)[0] if rest else self.llama.token_eos()] = 20.0
                return out
        out[self.llama.token_eos()] = 20.0
        return out


def _accepted(vocab, gbnf: str, text: str, complete_at_end: bool = True) -> bool:
    """Does llama.cpp's grammar engine take `text` token by token (and then allow the end of turn)?"""
    from llama_cpp import llama_cpp as C

    s = Sampler(vocab._model, vocab.n_vocab(), Sampling(temperature=0))
    try:
        s.constrain(gbnf)
        for tok in vocab.tokenize(text.encode(), add_bos=False, special=True):
            if not s._allowed(tok):
                return False
            C.llama_sampler_accept(s.grammar.sampler, tok)
        return s._allowed(vocab.token_eos()) if complete_at_end else True
    finally:
        s.close()


def _valid_calls(text: str) -> list[dict]:
    """Parse Hermes calls and check each against its tool's schema (raises on anything invalid)."""
    _, calls = parse_hermes_tool_calls(text)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for c in calls:
        assert c["name"] in schemas, c
        assert check(schemas[c["name"]]).errors(c["arguments"]) == [], c  # the environment's own check
    return calls


def test_sampling_defaults_are_llama_cpp_servers():
    """Both servers sample with the defaults llama-cpp-python's server fills in for a missing field."""
    from llama_cpp.server.types import CreateChatCompletionRequest

    fields = CreateChatCompletionRequest.model_fields
    s = Sampling()
    for name in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
        assert getattr(s, name) == fields[name].default, name
    assert Sampling.from_request({"temperature": 0, "top_p": None, "seed": 3}) == Sampling(temperature=0, seed=3)


def test_grammar_accepts_schema_valid_calls_and_nothing_else(vocab):
    """Token by token through llama.cpp's grammar engine: valid calls in the template's layout pass;
    an unknown tool, an extra argument, a missing required one or a wrong enum value do not."""
    gbnf, loose = tool_calls_grammar(TOOLS)
    assert loose == []

    ok = [
        '\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call>',
        '\n{"name": "list_stores", "arguments": {}}\n</tool_call>',
        ('\n{"name": "cancel_order", "arguments": {"order_id": "#W1", "reason": "mistake", "items": [1, 2], '
         '"refund": {"method": "card", "amount": 3.5}, "notify": true}}\n</tool_call>'),
        ('\n{"name": "list_stores", "arguments": {}}\n</tool_call>\n<tool_call>\n'
         '{"name": "get_user_details", "arguments": {"user_id": "u\\n2"}}\n</tool_call>'),
    ]
    bad = [
        '\n{"name": "drop_tables", "arguments": {}}\n</tool_call>',
        '\n{"name": "get_user_details", "arguments": {"user_id": "u1", "admin": true}}\n</tool_call>',
        '\n{"name": "cancel_order", "arguments": {"order_id": "#W1"}}\n</tool_call>',
        '\n{"name": "cancel_order", "arguments": {"order_id": "#W1", "reason": "bored"}}\n</tool_call>',
        '\n{"name": "get_user_details", "arguments": {"user_id": "line\nbreak"}}\n</tool_call>',
        '\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call> and some text',
    ]
    for text in ok:
        assert _accepted(vocab, gbnf, text), text
        _valid_calls("<tool_call>" + text)
    for text in bad:
        assert not _accepted(vocab, gbnf, text), text


def test_named_tool_choice_and_unknown_name():
    schema = call_schema(TOOLS, {"type": "function", "function": {"name": "list_stores"}})
    assert schema["properties"]["name"] == {"const": "list_stores"}
    with pytest.raises(ValueError, match="not among the tools"):
        call_schema(TOOLS, {"type": "function", "function": {"name": "nope"}})


def test_a_schema_the_converter_rejects_is_constrained_by_name_only():
    tools = [*TOOLS, {"type": "function", "function": {"name": "odd", "parameters": {"$ref": "#/nowhere"}}}]
    gbnf, loose = tool_calls_grammar(tools)
    assert loose == ["odd"] and "tool-call ::=" in gbnf


NESTED = {"type": "function", "function": {"name": "book", "parameters": {  # pydantic's layout (tau2 airline)
    "$defs": {"Flight": {"type": "object", "properties": {"number": {"type": "string"}, "date": {"type": "string"}},
                         "required": ["number", "date"]}},
    "type": "object", "properties": {"flights": {"type": "array", "items": {"$ref": "#/$defs/Flight"}},
                                     "first": {"$ref": "#/$defs/Flight", "description": "The first leg."}},
    "required": ["flights"]}}}


def test_local_refs_are_inlined_and_the_rest_left_equal():
    params = NESTED["function"]["parameters"]
    out = inline_refs(params)
    flight = params["$defs"]["Flight"]
    assert "$defs" not in out and out["properties"]["flights"]["items"] == flight
    assert out["properties"]["first"] == {**flight, "description": "The first leg."}
    plain = TOOLS[1]["function"]["parameters"]
    assert inline_refs(plain) is plain
    for bad, why in (({"$ref": "#/nowhere"}, "points nowhere"), ({"$ref": "http://x/s.json"}, "not a local"),
                     ({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
                       "$ref": "#/$defs/N"}, "recursive")):
        with pytest.raises(ValueError, match=why):
            inline_refs(bad)


def test_nested_models_by_ref_are_constrained_beside_other_tools(vocab):
    """A $ref means the parameters' root, not the call schema's they are embedded in: before inlining,
    llama.cpp's converter failed the whole request ("Unsupported ref stdin#/$defs/...")."""
    gbnf, loose = tool_calls_grammar([*TOOLS, NESTED])
    assert loose == []
    ok = '\n{"name": "book", "arguments": {"flights": [{"number": "HAT1", "date": "2024-05-01"}]}}\n</tool_call>'
    bad = '\n{"name": "book", "arguments": {"flights": [{"number": "HAT1"}]}}\n</tool_call>'
    assert _accepted(vocab, gbnf, ok)
    assert not _accepted(vocab, gbnf, bad)


def test_text_reply_passes_unconstrained(vocab):
    rt = ScriptedRuntime(vocab, "<|im_start|>assistant\n", ["Hello! How can I help you today?"])
    done = complete(rt, rt.prompt, Sampling(temperature=0), 64, tools=TOOLS)
    assert done.text == "Hello! How can I help you today?" and done.finish_reason == "stop"
    assert not done.constrained
    body = chat_response(done, TOOLS, "m", "id", 0)
    assert body["choices"][0]["message"]["content"] == done.text and "tool_calls" not in body["choices"][0]["message"]


def test_a_call_is_constrained_from_the_marker_on(vocab):
    """The scripted model announces, opens a call, then tries an unknown tool with an extra argument;
    the grammar, triggered at `<tool_call>`, turns it into a schema-valid call; the text before stays."""
    bad = 'Let me check.\n<tool_call>\n{"name": "get_user_detailz", "arguments": {"user_id": "u1", "admin": true}}'
    good = 'Let me check.\n<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call>'
    rt = ScriptedRuntime(vocab, "<|im_start|>assistant\n", [bad, good])
    done = complete(rt, rt.prompt, Sampling(temperature=0), 96, tools=TOOLS)
    assert done.constrained and done.finish_reason == "stop", done
    assert done.text == good
    body = chat_response(done, TOOLS, "m", "id", 0)
    msg = body["choices"][0]["message"]
    assert msg["content"] == "Let me check." and body["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"user_id": "u1"}
    # unconstrained, the same script is a malformed call
    free = complete(rt, rt.prompt, Sampling(temperature=0), 96, tools=None)
    assert free.text == bad and not free.constrained


def test_sampled_calls_are_schema_valid(vocab):
    """At temperature 1 with a scripted preference for garbage after the marker, every completed call
    parses and validates (what the grammar cannot bound, a string, may run to max_tokens: then the
    reply is cut off, never an invalid complete call)."""
    rt = ScriptedRuntime(vocab, "<|im_start|>assistant\n", ['<tool_call>\n{"name": "cancel_order", "arguments": '
                                                           '{"order_id": 12, "reason": "because", "refund": "all"}}'])
    finished = []
    for seed in range(6):
        done = complete(rt, rt.prompt, Sampling(temperature=1.0, seed=seed), 80, tools=TOOLS)
        assert done.text.startswith('<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": "')
        if done.finish_reason == "stop":
            finished += _valid_calls(done.text)
    assert finished  # not vacuous: with this seed set at least one reply closes its call


def test_required_and_named_tool_choice_start_under_the_grammar(vocab):
    """The scripted model would rather call list_stores; a named tool_choice makes it call the named tool."""
    rt = ScriptedRuntime(vocab, "<|im_start|>assistant\n<tool_call>",
                         ['\n{"name": "list_stores", "arguments": {}}\n</tool_call>',
                          '\n{"name": "get_user_details", "arguments": {"user_id": "u7"}}\n</tool_call>'])
    prompt = "<|im_start|>assistant\n"
    done = complete(rt, prompt, Sampling(temperature=0), 64, tools=TOOLS, tool_choice="required")
    assert done.text == '<tool_call>\n{"name": "list_stores", "arguments": {}}\n</tool_call>' and done.constrained
    named = complete(rt, prompt, Sampling(temperature=0), 64, tools=TOOLS,
                     tool_choice={"type": "function", "function": {"name": "get_user_details"}})
    assert named.finish_reason == "stop"
    assert [(c["name"], c["arguments"]) for c in _valid_calls(named.text)] == [("get_user_details", {"user_id": "u7"})]
    assert complete(rt, prompt, Sampling(temperature=0), 64, tools=TOOLS, tool_choice="none").constrained is False


def test_max_tokens_cuts_a_call_and_the_client_reports_it(vocab):
    from agentscaler.llm import LLMFormatError, parse_reply

    rt = ScriptedRuntime(vocab, "<|im_start|>assistant\n",
                         ['<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call>'])
    done = complete(rt, rt.prompt, Sampling(temperature=0), 8, tools=TOOLS)
    assert done.finish_reason == "length" and done.completion_tokens == 8
    with pytest.raises(LLMFormatError, match="cut off"):
        parse_reply(chat_response(done, TOOLS, "m", "id", 0))


def test_a_prompt_over_the_context_is_a_clear_error(vocab):
    rt = ScriptedRuntime(vocab, "x", ["y"])
    with pytest.raises(ValueError, match="exceed context window"):
        complete(rt, "word " * 5000, Sampling(temperature=0), 8)


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix(np.array([1, 2]), [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


def test_grammar_order_is_the_order_the_grammar_accepts(vocab):
    """Gold demonstrations list arguments in grammar_order, so the model learns an order it may write."""
    from agentscaler.decoding import grammar_order

    params = TOOLS[1]["function"]["parameters"]
    args = {"notify": False, "reason": "mistake", "items": [3], "order_id": "#W9"}
    ordered = grammar_order(params, args)
    assert list(ordered) == ["order_id", "reason", "items", "notify"] and ordered == args
    gbnf, _ = tool_calls_grammar(TOOLS)

    call = lambda a: "\n" + json.dumps({"name": "cancel_order", "arguments": a}) + "\n</tool_call>"  # noqa: E731
    assert _accepted(vocab, gbnf, call(ordered)) and not _accepted(vocab, gbnf, call(args))


def test_chat_response_parses_calls_strictly():
    """Our own parsing of finished text (no model): a well-formed call becomes tool_calls; a malformed one
    stays in content for the client to report with the raw text."""
    from agentscaler.decoding import Completion

    ok = Completion('ok\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', "stop", 5, 9)
    body = chat_response(ok, TOOLS, "m", "id", 0)
    msg = body["choices"][0]["message"]
    assert msg["content"] == "ok" and msg["tool_calls"][0]["function"]["name"] == "f"
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"a": 1}
    assert body["choices"][0]["finish_reason"] == "tool_calls" and body["usage"]["total_tokens"] == 14
    bad = Completion('<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>', "stop", 5, 9)
    msg = chat_response(bad, TOOLS, "m", "id", 0)["choices"][0]["message"]
    assert msg["content"] == bad.text and "tool_calls" not in msg
    assert "tool_calls" not in chat_response(ok, None, "m", "id", 0)["choices"][0]["message"]


def test_bounds_the_converter_leaves_out_are_enforced(vocab):
    """Small integer ranges, minimum 0 / 1 and email: what agentscaler.schemas.check (the environment's
    argument check) would reject, the grammar does not let through."""
    tools = [{"type": "function", "function": {"name": "place_order", "parameters": {
        "type": "object", "required": ["quantity", "price", "email", "count"], "properties": {
            "quantity": {"type": "integer", "minimum": 1, "maximum": 5}, "price": {"type": "number", "minimum": 0},
            "email": {"type": "string", "format": "email"}, "count": {"type": "integer", "minimum": 1}}}}}]
    gbnf, _ = tool_calls_grammar(tools)
    params = tools[0]["function"]["parameters"]

    def call(**a) -> str:
        args = {"quantity": 2, "price": 0.5, "email": "a.b@c.org", "count": 12, **a}
        return "\n" + json.dumps({"name": "place_order", "arguments": args}) + "\n</tool_call>", args

    for good in ({}, {"quantity": 5, "price": 0, "count": 1}, {"price": 1e3}):
        text, args = call(**good)
        assert _accepted(vocab, gbnf, text) and check(params).is_valid(args), good
    for bad in ({"quantity": 0}, {"quantity": 6}, {"price": -1}, {"email": "nobody"}, {"count": 0}):
        text, args = call(**bad)
        assert not check(params).is_valid(args) and not _accepted(vocab, gbnf, text), bad
