"""Which OpenAI-compatible endpoint(s) a command talks to, decided in one place.

The `--llm` value (one URL or `URL1,URL2,...`); when none is given, AGENTSCALER_LLM_URL; else the
local llama.cpp server with SmolLM2, started for the block and stopped after it. `local` asks for
the local server explicitly; with a trained `checkpoint` the local server is agentscaler.hf_server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def serve(llm: str | None = None, *, checkpoint: Path | str | None = None, log_path: Path | str | None = None,
          **server_options: Any) -> Iterator[list[str]]:
    """The base URLs for the block: the given ones, or the local server's (started here).

    server_options go to local_server (or hf_server with a checkpoint), e.g. n_threads."""
    value = resolve(llm)
    if value != LOCAL:
        yield [u.strip() for u in value.split(",") if u.strip()]
    elif checkpoint:
        with hf_server(checkpoint, log_path=log_path, **server_options) as url:
            yield [url]
    else:
        with local_server(log_path=log_path, **server_options) as url:
            yield [url]
