"""The one chat format every model here is trained and served with: ChatML with Hermes tool calls.

Hermes-style: tools are listed as JSON inside `<tools></tools>` in the system turn, the assistant
calls a tool by writing `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, and tool results
come back in a user turn as `<tool_response>...</tool_response>` (the layout Qwen2.5 and the
Hermes models use, so llama.cpp's and vLLM's Hermes parsers read what the model learns to write).

Why one home: SFT renders conversations with this template (training/chat_template.py installs it
on the tokenizer), and both servers render prompts with it (agentscaler.llm_server for GGUF models,
agentscaler.hf_server through the checkpoint's tokenizer), so a trained model sees at evaluation
exactly the text it was trained on, and the base model sees the same prompt as the trained one.

Every assistant turn body, including its `<|im_end|>`, sits inside `{% generation %}` markers so
`return_assistant_tokens_mask` (and TRL's `assistant_only_loss=True`) train on the agent's replies
and tool calls only; system, user and tool turns stay in the context but carry no loss. The
`<|im_start|>assistant` header is the prompt, not the reply, so it is outside the markers.

`render()` renders the template the way transformers' `apply_chat_template` does (same Jinja
options and `tojson`), without transformers: the llama.cpp server process does not load it.
"""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
END_OF_TURN = "<|im_end|>"

CHAT_TEMPLATE = (
    """{%- set default_system = '""" + DEFAULT_SYSTEM + """' %}
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set system_text = messages[0]['content'] or '' %}
{%- else %}
    {%- set system_text = default_system %}
{%- endif %}
{{- '<|im_start|>system\\n' + system_text }}
{%- if tools %}
    {{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}{{- tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>' }}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- for message in messages %}
    {%- if message['role'] == 'user' or (message['role'] == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}
    {%- elif message['role'] == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
        {%- if message['content'] %}
            {{- message['content'] }}
        {%- endif %}
        {%- if message['tool_calls'] %}
            {%- for tool_call in message['tool_calls'] %}
                {%- if tool_call['function'] is defined %}
                    {%- set tool_call = tool_call['function'] %}
                {%- endif %}
                {%- if message['content'] or not loop.first %}
                    {{- '\\n' }}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' + tool_call['name'] + '", "arguments": ' }}
                {{- tool_call['arguments'] | tojson }}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
        {%- endgeneration %}
    {%- elif message['role'] == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + (message['content'] or '') + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
)


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body (transformers uses it to mark the
    assistant's tokens for the loss mask; rendering a prompt needs only the text)."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' tojson (Jinja's own sorts keys and escapes HTML)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=4)
def _compiled(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    return env.from_string(template)


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages -> what the template reads: tool-call arguments as dicts, text content.

    Arguments that are not valid JSON stay a string (the template then shows them as a JSON string).
    Raises ValueError on a message that is not a dict with a known role.
    """
    out = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unsupported message: {str(m)[:200]}")
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            m["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = []
        for tc in m.get("tool_calls") or []:
            fn = dict(tc.get("function", tc))
            args = fn.get("arguments", {})
            if isinstance(args, str):
                with contextlib.suppress(json.JSONDecodeError):
                    args = json.loads(args) if args.strip() else {}
            calls.append({"type": "function", "function": {"name": fn.get("name"), "arguments": args}})
        if calls:
            m["tool_calls"] = calls
        out.append(m)
    return out


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
           add_generation_prompt: bool = True, template: str = CHAT_TEMPLATE) -> str:
    """The prompt text for `messages` (OpenAI form) and `tools`, as apply_chat_template(tokenize=False) gives it."""
    return _compiled(template).render(messages=normalize_messages(messages), tools=tools or None,
                                      add_generation_prompt=add_generation_prompt)
