"""The one decoding rule for every model we compare, in either server (llama.cpp or transformers).

Why: comparing a base and a trained model is fair only if both decode the same way. The agent
stays free to answer in text or to call a tool; once it opens a call (`<tool_call>`) the rest of
the reply is constrained by a grammar built from the offered tools' JSON Schemas, so whatever it
calls is a schema-valid call of a real tool. With tools offered (tool_choice auto), generation
runs free until the marker, then continues under the grammar from there (the prompt cache serves
the shared prefix); `tool_choice="required"` or a named function starts under the grammar; a
`response_format` grammar constrains the whole reply.

The sampler is llama.cpp's own (the chain llama-cpp-python builds: repetition penalties over the
last 64 generated tokens, top-k, typical, top-p, min-p, temperature and a seeded draw, or greedy at
temperature 0), with the grammar applied the way llama.cpp's common sampler (llama-server) does:
draw, and only if the grammar rejects the token, draw again from the grammar-masked vocabulary.
It works on logits from any runtime: `Runtime` is the small interface a server implements
(tokenize, detokenize, next-token logits reusing the previous call's common prefix, and a llama.cpp
vocabulary for the grammar and the end-of-generation tokens). The llama.cpp server
(agentscaler.llm_server) and the checkpoint server (agentscaler.hf_server) both call `complete()`;
only the forward pass differs.

The grammar comes from llama-cpp-python's JSON-Schema converter with upstream llama.cpp's stricter
string rule (no raw control characters in strings, so every constrained call parses as JSON), plus
the bounds tools use most (bound_rule: small integer ranges, minimum 0 or 1, email). A tool whose
schema the converter cannot turn into a grammar gets `arguments: object` (named in
`Completion.loose_tools`). What the grammar does not enforce (other numeric bounds, string formats
beyond date, time, date-time, uuid and email) is left to the environment's argument check.
"""

from __future__ import annotations

import ctypes
import functools
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentscaler.chat_template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from agentscaler.llm import LLMFormatError, parse_hermes_tool_calls
from agentscaler.schemas import local_ref

__all__ = ["Completion", "Runtime", "Sampler", "Sampling", "call_schema", "chat_response", "common_prefix",
           "complete", "grammar_order", "tool_calls_grammar"]

# Between the marker and each call, and after it: exactly the layout of the chat template.
_CALLS_ROOT = ('root ::= "\\n" tool-call "\\n' + TOOL_CALL_CLOSE + '" ( "\\n' + TOOL_CALL_OPEN
               + '\\n" tool-call "\\n' + TOOL_CALL_CLOSE + '" )*')


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; the defaults are llama-cpp-python's server defaults (tests hold them equal)."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.1
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64  # llama-cpp-python's last_n_tokens_size
    seed: int | None = None

    @classmethod
    def from_request(cls, req: dict[str, Any]) -> "Sampling":
        """From an OpenAI request body; missing or null fields keep the defaults."""
        names = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "frequency_penalty",
                 "presence_penalty", "seed")
        return cls(**{k: req[k] for k in names if req.get(k) is not None})


# --- the grammar ----------------------------------------------------------------------------------

def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function", tool)


def call_schema(tools: list[dict[str, Any]], tool_choice: Any = None) -> dict[str, Any]:
    """JSON Schema of one call object {"name", "arguments"} allowed by tool_choice."""
    fns = [_function(t) for t in tools]
    if isinstance(tool_choice, dict):
        wanted = tool_choice.get("function", {}).get("name")
        fns = [f for f in fns if f.get("name") == wanted]
        if not fns:
            raise ValueError(f"tool_choice names {wanted!r}, which is not among the tools")
    options = [{"type": "object", "properties": {"name": {"const": f["name"]},
                                                 "arguments": f.get("parameters") or {"type": "object"}},
                "required": ["name", "arguments"]} for f in fns]
    return options[0] if len(options) == 1 else {"anyOf": options}


def grammar_order(parameters: dict[str, Any] | None, arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments` in the order the grammar lets a model write them (llama.cpp's converter: required
    properties, then optional ones, each in schema order; others last), so demonstrations teach the
    order constrained decoding allows. Nested objects keep their order."""
    props = list(((parameters or {}).get("properties") or {}))
    required = set((parameters or {}).get("required") or [])
    order = [k for k in props if k in required] + [k for k in props if k not in required]
    return {**{k: arguments[k] for k in order if k in arguments},
            **{k: v for k, v in arguments.items() if k not in props}}


@functools.cache
def _strict_strings() -> None:
    """llama-cpp-python's JSON-Schema grammar lets raw control characters (newlines) into strings,
    which is not JSON; use upstream llama.cpp's stricter rule (once per process)."""
    from llama_cpp import llama_grammar  # the [llm] extra: loaded where a server decodes

    rules = getattr(llama_grammar, "PRIMITIVE_RULES", {})
    if "char" in rules:
        rules["char"] = llama_grammar.BuiltinRule(
            r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])', [])


_DIGITS = "[1-9] [0-9]{0,15}"


def bound_rule(schema: dict[str, Any]) -> str | None:
    """GBNF for what llama-cpp-python's converter leaves out and tools often use: small integer ranges
    (as the list of values), non-negative numbers and integers (minimum 0), positive integers
    (minimum 1), and `format: email` (the `@` jsonschema checks). None for anything else."""
    if not isinstance(schema, dict) or any(k in schema for k in ("enum", "const", "anyOf", "oneOf", "allOf", "$ref")):
        return None
    kind, lo, hi = schema.get("type"), schema.get("minimum"), schema.get("maximum")
    if kind == "string" and schema.get("format") == "email" and not schema.get("pattern"):
        return '"\\"" [a-zA-Z0-9._%+-]{1,64} "@" [a-zA-Z0-9.-]{1,64} "\\"" space'
    if kind not in ("integer", "number") or "exclusiveMinimum" in schema or "exclusiveMaximum" in schema:
        return None
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi))
    if kind == "integer" and whole and 0 <= hi - lo <= 255:
        return "(" + " | ".join(f'"{v}"' for v in range(lo, hi + 1)) + ") space"
    if hi is not None or not isinstance(lo, (int, float)) or isinstance(lo, bool) or lo < 0:
        return None
    if kind == "integer" and lo <= 1:
        return (f"{_DIGITS} space" if lo == 1 else f'("0" | {_DIGITS}) space')
    if kind == "number" and lo == 0:
        return f'("0" | {_DIGITS}) ("." [0-9]{{1,16}})? ([eE] [-+]? [0-9]{{1,3}})? space'
    return None


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF text (root rule `root`) of a JSON Schema, with strict JSON strings and bound_rule's bounds."""
    from llama_cpp import llama_grammar  # the [llm] extra, as in _strict_strings

    _strict_strings()

    class Converter(llama_grammar.SchemaConverter):
        def visit(self, schema: dict[str, Any], name: str) -> str:
            rule = bound_rule(schema)
            if rule is None:
                return super().visit(schema, name)
            return self._add_rule(name + "-" if name in llama_grammar.RESERVED_NAMES else name or "root", rule)

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "stdin"), "")
    return converter.format_grammar()


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its local `$ref`s ("#/$defs/FlightInfo", any JSON pointer into itself) replaced by
    what they point to and its root `$defs` / `definitions` dropped. Why: a tool's parameters are
    embedded in the call schema, where "#" means that schema's root, not the parameters' (pydantic
    writes nested models this way: tau2's airline tools). A schema without `$ref` comes back equal.
    ValueError for a ref that is not local, points nowhere or is recursive."""

    def resolve(ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ValueError(f"$ref {ref!r} is not a local reference")
        target = local_ref(schema, ref)
        if target is None:
            raise ValueError(f"$ref {ref!r} points nowhere in the schema")
        return target

    def walk(node: Any, refs: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(v, refs) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" not in node:
            return {k: walk(v, refs) for k, v in node.items()}
        ref = node["$ref"]
        if ref in refs:
            raise ValueError(f"$ref {ref!r} is recursive")
        target = walk(resolve(ref), (*refs, ref))
        rest = {k: walk(v, refs) for k, v in node.items() if k != "$ref"}  # e.g. a description beside it
        return {**target, **rest} if isinstance(target, dict) else target

    if "$ref" not in json.dumps(schema):
        return schema
    return walk({k: v for k, v in schema.items() if k not in ("$defs", "definitions")}, ())


@functools.lru_cache(maxsize=64)
def _tool_calls_grammar(tools_json: str, choice_json: str) -> tuple[str, tuple[str, ...]]:
    tools, tool_choice = json.loads(tools_json), json.loads(choice_json)
    loose: list[str] = []
    fixed = []
    for t in tools:
        fn = _function(t)
        try:
            params = inline_refs(fn.get("parameters") or {"type": "object"})
            schema_grammar(params)
            fn = {**fn, "parameters": params}
        except Exception:  # noqa: BLE001 - the converter rejects this schema: constrain the name only
            loose.append(str(fn.get("name")))
            fn = {**fn, "parameters": {"type": "object"}}
        fixed.append({"type": "function", "function": fn})
    body = schema_grammar(call_schema(fixed, tool_choice))
    lines = [("tool-call ::= " + ln[len("root ::= "):]) if ln.startswith("root ::= ") else ln
             for ln in body.splitlines()]
    if any(ln.startswith("tool-call-") or ln.startswith("tool-call ::=") for ln in body.splitlines()):
        raise ValueError("grammar rule name clash on 'tool-call'")
    return "\n".join([*lines, _CALLS_ROOT]), tuple(loose)


def tool_calls_grammar(tools: list[dict[str, Any]], tool_choice: Any = None) -> tuple[str, list[str]]:
    """GBNF for what follows `<tool_call>`: one or more calls of the offered tools, each closed by
    `</tool_call>`, in the chat template's layout; and the names of tools constrained by name only."""
    text, loose = _tool_calls_grammar(json.dumps(tools), json.dumps(tool_choice))
    return text, list(loose)


# --- llama.cpp's sampler over any logits -----------------------------------------------------------

class Sampler:
    """llama.cpp's samplers for one reply: penalties and the draw, and (once set) a grammar.

    Separate chains, so a grammar can join in the middle of a reply while the penalty history and
    the random state carry on."""

    def __init__(self, vocab_model: Any, n_vocab: int, sampling: Sampling):
        from llama_cpp import _internals  # the [llm] extra, as in _strict_strings
        from llama_cpp import llama_cpp as C

        self._C, self._internals, self._model = C, _internals, vocab_model
        self.n_vocab = n_vocab
        self.penalties = _internals.LlamaSampler()
        self.penalties.add_penalties(n_vocab, sampling.penalty_last_n, sampling.repeat_penalty,
                                     sampling.frequency_penalty, sampling.presence_penalty)
        self.draw = _internals.LlamaSampler()
        if sampling.temperature == 0:
            self.draw.add_greedy()
        else:
            seed = sampling.seed if sampling.seed is not None else random.getrandbits(32)
            self.draw.add_top_k(sampling.top_k)
            self.draw.add_typical(sampling.typical_p, 1)
            self.draw.add_top_p(sampling.top_p, 1)
            self.draw.add_min_p(sampling.min_p, 1)
            self.draw.add_temp(sampling.temperature)
            self.draw.add_dist(seed & 0xFFFFFFFF)
        self.grammar: Any = None
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._data = np.zeros(n_vocab, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)],
                                                     align=True))
        assert self._data.dtype.itemsize == ctypes.sizeof(C.llama_token_data)

    def constrain(self, gbnf: str) -> None:
        """From the next token on, only text the grammar (root rule `root`) allows, then end of turn."""
        ptr = self._C.llama_sampler_init_grammar(self._model.vocab, gbnf.encode("utf-8"), b"root")
        if not ptr:
            raise ValueError(f"llama.cpp could not parse the grammar (first lines: {gbnf[:300]!r})")
        self.close_grammar()
        self.grammar = self._internals.LlamaSampler()
        self._C.llama_sampler_chain_add(self.grammar.sampler, ptr)

    def _fill(self, logits: np.ndarray) -> Any:
        d = self._data
        d["id"] = self._ids  # samplers sort the array in place: every draw starts from vocabulary order
        d["logit"] = logits
        d["p"] = 0.0
        return self._C.llama_token_data_array(data=d.ctypes.data_as(self._C.llama_token_data_p), size=self.n_vocab,
                                              selected=-1, sorted=False)

    def _draw(self, cur: Any, chains: list[Any]) -> int:
        for c in chains:
            self._C.llama_sampler_apply(c.sampler, ctypes.byref(cur))
        if not 0 <= cur.selected < cur.size:
            raise RuntimeError("the sampler selected no token")
        return int(cur.data[cur.selected].id)

    def _allowed(self, token: int) -> bool:
        one = (self._C.llama_token_data * 1)(self._C.llama_token_data(token, 1.0, 0.0))
        cur = self._C.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        self._C.llama_sampler_apply(self.grammar.sampler, ctypes.byref(cur))
        return cur.data[0].logit != -np.inf

    def sample(self, logits: np.ndarray) -> int:
        """One token, as llama.cpp's common sampler draws it: from the unconstrained distribution;
        if the grammar rejects that token, again with the grammar applied to the whole vocabulary
        first (checking one token is far cheaper than masking 49k, and greedy picks the same token)."""
        token = self._draw(self._fill(logits), [self.penalties, self.draw])
        if self.grammar is not None and not self._allowed(token):
            token = self._draw(self._fill(logits), [self.penalties, self.grammar, self.draw])
        for c in (self.penalties, self.grammar, self.draw):
            if c is not None:
                self._C.llama_sampler_accept(c.sampler, token)
        return token

    def close_grammar(self) -> None:
        if self.grammar is not None:
            self.grammar.close()
            self.grammar = None

    def close(self) -> None:
        self.close_grammar()
        self.penalties.close()
        self.draw.close()


# --- one reply ------------------------------------------------------------------------------------

class Runtime(Protocol):
    """What a server gives `complete()`: the model behind it."""

    vocab_model: Any  # a llama_cpp LlamaModel whose vocabulary is the model's (grammar, end of generation)
    n_vocab: int
    last_evaluated: int

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, tokens: list[int], prompt: list[int]) -> str: ...

    def logits(self, tokens: list[int]) -> np.ndarray:
        """Next-token logits after `tokens`, evaluating only what differs from the previous call's
        tokens (and at least the last one); sets `last_evaluated` to how many it evaluated."""
        ...

    def n_ctx(self) -> int: ...


def common_prefix(a: Any, b: Any) -> int:
    """Length of the common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


@dataclass
class Completion:
    text: str
    finish_reason: str  # stop | length
    prompt_tokens: int
    completion_tokens: int
    constrained: bool = False  # some of the reply was decoded under a grammar
    loose_tools: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


class _Timed:
    """The runtime's logits calls, timed: the first (the prompt, minus what the runtime reused) and the rest."""

    def __init__(self, runtime: Runtime):
        self.rt = runtime
        self.prompt_s = self.decode_s = 0.0
        self.prompt_evaluated: int | None = None

    def logits(self, tokens: list[int]) -> np.ndarray:
        t = time.perf_counter()
        out = self.rt.logits(tokens)
        if self.prompt_evaluated is None:
            self.prompt_s, self.prompt_evaluated = time.perf_counter() - t, self.rt.last_evaluated
        else:
            self.decode_s += time.perf_counter() - t
        return out


def _is_eog(runtime: Runtime, token: int) -> bool:
    from llama_cpp import llama_cpp as C  # the [llm] extra, as in _strict_strings

    return bool(C.llama_vocab_is_eog(runtime.vocab_model.vocab, token))


def _run(rt: _Timed, sampler: Sampler, prompt: list[int], budget: int, stops: list[str],
         marker: str | None) -> tuple[str, str, int]:
    """Generate after `prompt` until end of turn, a stop string, the marker (finish "marker", the
    text then ends with it), or `budget` tokens. Returns (text, finish, tokens generated)."""
    out: list[int] = []
    text = ""
    while len(out) < budget:
        token = sampler.sample(rt.logits(prompt + out))
        if _is_eog(rt.rt, token):
            return text, "stop", len(out)
        out.append(token)
        text = rt.rt.detokenize(out, prompt)
        if marker is not None and marker in text:
            return text[:text.index(marker) + len(marker)], "marker", len(out)
        for s in stops:
            if s in text:
                return text[:text.index(s)], "stop", len(out)
    return text, "length", len(out)


def complete(runtime: Runtime, prompt: str, sampling: Sampling, max_tokens: int, *,
             tools: list[dict[str, Any]] | None = None, tool_choice: Any = None, stop: list[str] | None = None,
             grammar: str | None = None) -> Completion:
    """One reply to `prompt` under the decoding rule above (see the module docstring).

    Raises ValueError when the prompt does not fit the context."""
    rt = _Timed(runtime)
    sampler = Sampler(runtime.vocab_model, runtime.n_vocab, sampling)
    try:
        if tool_choice == "none":
            tools = None
        forced = bool(tools) and (tool_choice == "required" or isinstance(tool_choice, dict))
        ids = runtime.tokenize(prompt + (TOOL_CALL_OPEN if forced else ""))
        n_ctx = runtime.n_ctx()
        if len(ids) >= n_ctx:
            raise ValueError(f"Requested tokens ({len(ids)}) exceed context window of {n_ctx}")
        budget = min(max_tokens, n_ctx - len(ids))
        stops = [s for s in (stop or []) if s]
        calls_grammar, loose = tool_calls_grammar(tools, tool_choice) if tools else ("", [])
        constrained = False
        if forced:
            sampler.constrain(calls_grammar)
            constrained = True
            text, finish, n = _run(rt, sampler, ids, budget, [], None)
            text = TOOL_CALL_OPEN + text
        else:
            if grammar:
                sampler.constrain(grammar)
                constrained = True
            text, finish, n = _run(rt, sampler, ids, budget, stops, TOOL_CALL_OPEN if tools else None)
            if finish == "marker":
                sampler.constrain(calls_grammar)
                constrained = True
                ids2 = runtime.tokenize(prompt + text)
                budget2 = min(budget - n, n_ctx - len(ids2))
                rest, finish, n2 = _run(rt, sampler, ids2, budget2, [], None) if budget2 > 0 else ("", "length", 0)
                text, n = text + rest, n + n2
        evaluated = rt.prompt_evaluated if rt.prompt_evaluated is not None else 0
        timings = {"prompt_s": round(rt.prompt_s, 4), "decode_s": round(rt.decode_s, 4),
                   "prompt_evaluated": evaluated, "prompt_reused": len(ids) - evaluated}
        return Completion(text=text, finish_reason=finish, prompt_tokens=len(ids), completion_tokens=n,
                          constrained=constrained, loose_tools=loose if constrained else [], timings=timings)
    finally:
        sampler.close()


def chat_response(completion: Completion, tools: list[dict[str, Any]] | None, model: str, response_id: str,
                  created: int) -> dict[str, Any]:
    """An OpenAI chat.completion body. Hermes calls in the text become `tool_calls` when they all
    parse strictly; otherwise the text stays in `content`, so the client reports it with the raw text."""
    text, finish = completion.text, completion.finish_reason
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if tools and (TOOL_CALL_OPEN in text or TOOL_CALL_CLOSE in text):
        try:
            content, calls = parse_hermes_tool_calls(text)
        except LLMFormatError:
            pass
        else:
            if calls:
                msg["content"] = content
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"],
                                                   "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                                     for c in calls]
                finish = "tool_calls" if finish == "stop" else finish
    usage = {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
             "total_tokens": completion.prompt_tokens + completion.completion_tokens}
    return {"id": response_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}], "usage": usage,
            "timings": {**completion.timings, "constrained": completion.constrained,
                        "loose_tools": completion.loose_tools}}

