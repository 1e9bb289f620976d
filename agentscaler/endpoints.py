"""Which OpenAI-compatible endpoint(s) a command talks to, decided in one place.

The `--llm` value (one URL or `URL1,URL2,...`); when none is given, AGENTSCALER_LLM_URL; else the
local llama.cpp server with SmolLM2, started for the block and stopped after it. `local` asks for
the local server explicitly. With a Hugging Face `checkpoint` (a trained model, or the base
model's HF conversion) the local server is the same llama.cpp server on the checkpoint's GGUF
export at `precision` (agentscaler.gguf_export), so base and trained models compared this way
share runtime, decoding and precision; `engine="hf"` serves it with agentscaler.hf_server instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentscaler.gguf_export import export_gguf
from agentscaler.hf_server import hf_server
from agentscaler.llm_server import local_server
from agentscaler.settings import Settings

LOCAL = "local"


def resolve(llm: str | None = None) -> str:
    """The endpoint value in force: `llm`, else AGENTSCALER_LLM_URL, else "local"."""
    return llm or Settings.from_env().llm_url or LOCAL


def is_local(llm: str | None = None) -> bool:
    """True when the local server would be started (it has one slot: callers send one request at a time)."""
    return resolve(llm) == LOCAL


ENGINES = ("llama", "hf")


@contextlib.contextmanager
def serve(llm: str | None = None, *, checkpoint: Path | str | None = None, engine: str = "llama",
          precision: str = "f16", threads: int | None = None, log_path: Path | str | None = None,
          replicas: int = 1, **server_options: Any) -> Iterator[list[str]]:
    """The base URLs for the block: the given ones, or the local server's (started here).

    `threads` is each server's CPU threads; `replicas` local servers of the same model are started
    (the client spreads requests over them, least busy first: on 2 cores two one-thread servers
    decode about twice what one does, where two threads in one server spin against each other);
    server_options go to local_server (e.g. n_ctx, model_alias) or, with engine "hf", to hf_server
    (e.g. max_new_tokens, model_alias)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {ENGINES}")
    value = resolve(llm)
    if value != LOCAL:
        yield [u.strip() for u in value.split(",") if u.strip()]
        return
    model = export_gguf(checkpoint, precision) if checkpoint and engine == "llama" else None
    if checkpoint and engine == "llama":
        server_options.setdefault("model_alias", Path(checkpoint).name)
    with contextlib.ExitStack() as stack:
        urls = []
        for i in range(max(1, replicas)):
            log = Path(log_path).with_suffix(f".{i}{Path(log_path).suffix}") if log_path and i else log_path
            if checkpoint and engine == "hf":
                urls.append(stack.enter_context(hf_server(checkpoint, threads=threads, log_path=log, **server_options)))
            else:
                urls.append(stack.enter_context(local_server(model, n_threads=threads, log_path=log, **server_options)))
        yield urls


def runtime_label(checkpoint: Path | str | None = None, engine: str = "llama", precision: str = "f16") -> str:
    """How `serve` runs a model, for reports: 'llama.cpp f16 (GGUF export)', 'transformers fp32', ..."""
    if checkpoint and engine == "hf":
        return "transformers fp32 (hf_server)"
    return f"llama.cpp {precision} (GGUF export)" if checkpoint else "llama.cpp Q4_1 (shipped GGUF)"
