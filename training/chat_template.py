"""Install the ChatML tool-calling chat template used for SFT on a tokenizer (SmolLM2 and the tiny test model).

The template itself lives in agentscaler/chat_template.py, its one home: the servers render prompts
with the same text, so a trained model is evaluated on exactly the format it was trained on.
"""

from __future__ import annotations

from typing import Any

from agentscaler.chat_template import CHAT_TEMPLATE, DEFAULT_SYSTEM

__all__ = ["CHAT_TEMPLATE", "DEFAULT_SYSTEM", "apply_template"]


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
