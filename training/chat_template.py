"""The ChatML tool-calling chat template used for SFT (SmolLM2 and the tiny test model).

Hermes-style: tools are listed as JSON inside `<tools></tools>` in the system turn, the assistant
calls a tool by writing `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, and tool results
come back in a user turn as `<tool_response>...</tool_response>` (the layout Qwen2.5 and the
Hermes models use, so llama.cpp's and vLLM's Hermes parsers read what the model learns to write).

Every assistant turn body, including its `<|im_end|>`, sits inside `{% generation %}` markers so
`return_assistant_tokens_mask` (and TRL's `assistant_only_loss=True`) train on the agent's replies
and tool calls only; system, user and tool turns stay in the context but carry no loss. The
`<|im_start|>assistant` header is the prompt, not the reply, so it is outside the markers.
"""

from __future__ import annotations

from typing import Any

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

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


def apply_template(tokenizer: Any) -> Any:
    """Install the training template (and ChatML special tokens) on a tokenizer, in place."""
    tokenizer.chat_template = CHAT_TEMPLATE
    if tokenizer.eos_token != "<|im_end|>" and "<|im_end|>" in tokenizer.get_vocab():
        tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        # A pad distinct from eos, so padding never hides the end-of-turn token from the loss.
        for cand in ("<|endoftext|>", "<empty_output>"):
            if cand in tokenizer.get_vocab():
                tokenizer.pad_token = cand
                break
    return tokenizer
