"""Process-wide settings, read from the environment once (AGENTSCALER_* variables)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict


def configure_prefect_env() -> None:
    """Local Prefect runs use the ephemeral server with analytics off (no phoning home)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Flow and task run logs at INFO: our tasks write one line per domain step (flows/__init__.py
    # drops Prefect's per-task "Completed" line). The command line shows its own progress on the
    # console instead (it raises Prefect's console handler to WARNING: agentscaler.progress).
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    # The ephemeral server needs ~19 s to start on 2 busy cores; Prefect's default limit is 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


def cache_root() -> Path:
    """The per-user cache: corpora, converted models, embedding tables (AGENTSCALER_CACHE, default
    ~/.cache/agentscaler). Shared by every workspace on the machine."""
    return Path(os.environ.get("AGENTSCALER_CACHE") or Path.home() / ".cache" / "agentscaler")


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workspace: Path = Path("workspace")
    cache_dir: Path = Path.home() / ".cache" / "agentscaler"
    llm_url: str | None = None  # None = start the local llama.cpp server when a stage needs a model
    llm_model: str = "smollm2-135m"
    allow_unsafe_sandbox: bool = False

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        return cls(
            workspace=Path(env.get("AGENTSCALER_WORKSPACE", "workspace")),
            cache_dir=cache_root(),
            llm_url=env.get("AGENTSCALER_LLM_URL") or None,
            llm_model=env.get("AGENTSCALER_LLM_MODEL", "smollm2-135m"),
            allow_unsafe_sandbox=env.get("AGENTSCALER_UNSAFE_SANDBOX", "") == "1",
        )
