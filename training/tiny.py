"""A tiny Llama built from a config (no download) for CPU tests, with the SmolLM2 tokenizer.

It exercises exactly the code path of the real model (same tokenizer, template, trainer), only
smaller: 2 layers, hidden size 64, ~3.2M parameters (almost all of them the 49k-token embedding).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class TinyModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0


def build_tiny_model(tokenizer: Any, cfg: TinyModelConfig | None = None) -> Any:
    """A freshly initialised LlamaForCausalLM sized for `tokenizer` (deterministic for a seed)."""
    import torch  # the [train] extra: heavy, loaded on use
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = cfg or TinyModelConfig()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    return LlamaForCausalLM(config)
