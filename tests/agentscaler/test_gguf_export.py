"""HF checkpoint -> GGUF (agentscaler.gguf_export): the written file loads back into transformers with the
same weights (the q/k permutation undone exactly), llama.cpp computes the same logits as transformers
(tiny model; and SmolLM2 itself: base GGUF -> HF -> GGUF), and both runtimes decode the same reply."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from agentscaler.gguf_export import GGUFExportError, export_gguf, permute_rotary, precision_of, write_gguf

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("gguf")
                                is None, reason="needs llama-cpp-python and gguf")

PROMPT = ("<|im_start|>system\nYou help users with their orders.<|im_end|>\n<|im_start|>user\n"
          "Please cancel order #W123, I ordered it by mistake.<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory, tokenizer) -> Path:
    from training.tiny import TinyModelConfig, build_tiny_model

    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                                        num_attention_heads=4, num_key_value_heads=2))
    out = tmp_path_factory.mktemp("tiny") / "tiny-ckpt"
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def _llama_logits(gguf: Path, ids: list[int]) -> np.ndarray:
    from llama_cpp import Llama

    llama = Llama(str(gguf), n_ctx=512, logits_all=True, verbose=False, n_threads=1, n_threads_batch=1)
    try:
        llama.eval(ids)
        return np.array(llama.scores[:len(ids)])
    finally:
        llama.close()


def _hf_logits(ckpt: Path, ids: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def test_permutation_is_the_inverse_of_transformers():
    """transformers' GGUF loader reverses llama.cpp's rotary layout; ours must be its inverse."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    undo = LlamaTensorProcessor(config={"num_attention_heads": 4, "num_key_value_heads": 2})
    for rows, heads, kv in ((16, 4, 4), (8, 4, 2)):
        w = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        p = permute_rotary(w, kv)
        assert not np.array_equal(p, w)
        assert np.array_equal(undo._reverse_permute_weights(p, heads, kv), w)


def test_weights_round_trip_exactly(tiny_ckpt, tmp_path):
    """f32 export, read back with gguf's reader and transformers' own inverse permutation: every
    tensor equal to the checkpoint's, under llama.cpp's names and shapes."""
    import gguf as gguf_py
    from safetensors.numpy import load_file
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    from agentscaler.gguf_export import gguf_name

    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    undo = LlamaTensorProcessor(config=cfg)
    path = write_gguf(tiny_ckpt, tmp_path / "tiny-f32.gguf", "f32")
    back = {t.name: t for t in gguf_py.GGUFReader(str(path)).tensors}
    ours = load_file(str(tiny_ckpt / "model.safetensors"))
    assert set(back) == {gguf_name(n) for n in ours}
    for name, w in ours.items():
        t = back[gguf_name(name)]
        got = undo.process(np.array(t.data), t.name).weights
        assert got.dtype == np.float32 and np.array_equal(got, w), name


def test_llama_cpp_logits_equal_transformers_on_the_tiny_model(tiny_ckpt, tokenizer, tmp_path):
    ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    hf = _hf_logits(tiny_ckpt, ids)
    for precision, tol in (("f32", 1e-3), ("f16", 2e-2)):
        gguf = export_gguf(tiny_ckpt, precision, out=tmp_path / f"tiny-{precision}.gguf")
        assert precision_of(gguf) == precision
        lc = _llama_logits(gguf, ids)
        assert np.abs(lc - hf).max() < tol * max(1.0, np.abs(hf).max()), precision


def test_export_is_written_once_per_checkpoint_state(tiny_ckpt, tmp_path):
    out = tmp_path / "x.gguf"
    first = export_gguf(tiny_ckpt, "f16", out=out)
    stamp = first.stat().st_mtime_ns
    assert export_gguf(tiny_ckpt, "f16", out=out).stat().st_mtime_ns == stamp
    cfg = tiny_ckpt / "config.json"
    os.utime(cfg, ns=(cfg.stat().st_atime_ns, cfg.stat().st_mtime_ns + 10**9))  # a changed checkpoint
    assert export_gguf(tiny_ckpt, "f16", out=out).stat().st_mtime_ns != stamp
    assert json.loads(out.with_suffix(".json").read_text())["precision"] == "f16"


def test_unsupported_checkpoints_are_clear_errors(tiny_ckpt, tmp_path):
    bad = tmp_path / "gpt"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(GGUFExportError, match="only llama"):
        write_gguf(bad, tmp_path / "o.gguf")
    other = tmp_path / "vocab"
    other.mkdir()
    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "vocab_size": 1000}))
    with pytest.raises(GGUFExportError, match="vocabulary of 1000"):
        write_gguf(other, tmp_path / "o.gguf")
    with pytest.raises(GGUFExportError, match="precision"):
        write_gguf(tiny_ckpt, tmp_path / "o.gguf", "q2")
    assert not list(tmp_path.glob(".o.gguf*")) and not (tmp_path / "o.gguf").exists()


@pytest.mark.slow
def test_smollm2_round_trip_base_gguf_to_hf_to_gguf(tmp_path):
    """The shipped Q4_1 GGUF -> HF float32 (training/gguf_convert.py, what SFT starts from) -> our f32
    GGUF: llama.cpp and transformers agree on every position's logits (max |diff| < 0.1, same argmax);
    and the two runtimes decode the same greedy replies through agentscaler.decoding."""
    import torch
    from llama_cpp import Llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentscaler.decoding import Sampling, complete
    from agentscaler.hf_server import HFRuntime
    from agentscaler.llm_server import LlamaRuntime, default_model_path
    from training.gguf_convert import convert_smollm2

    base = convert_smollm2()
    gguf = export_gguf(base, "f32", out=tmp_path / "smollm2-f32.gguf")
    tok = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval()
    llama = Llama(str(gguf), n_ctx=1024, logits_all=True, verbose=False, n_threads=1, n_threads_batch=1)
    try:
        ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
        llama.eval(ids)
        lc = np.array(llama.scores[:len(ids)])
        with torch.no_grad():
            hf = model(input_ids=torch.tensor([ids])).logits[0].numpy()
        assert np.abs(lc - hf).max() < 0.1
        assert np.array_equal(lc.argmax(-1), hf.argmax(-1))

        tools = [{"type": "function", "function": {"name": "cancel_order", "description": "Cancel an order.",
                                                   "parameters": {"type": "object", "required": ["order_id"],
                                                                  "properties": {"order_id": {"type": "string"}}}}}]
        runtimes = [LlamaRuntime(llama), HFRuntime(model, tok, default_model_path(), "cpu")]
        for choice in ("required", None):
            replies = [complete(rt, PROMPT, Sampling(temperature=0), 16, tools=tools, tool_choice=choice).text
                       for rt in runtimes]
            assert replies[0] == replies[1], choice
    finally:
        llama.close()
