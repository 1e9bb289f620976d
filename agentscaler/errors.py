"""Error classes that decide retries: transient errors are retried with backoff, others are not.

A domain whose generated code is broken fails the same way every time (deterministic); a
dropped connection to the LLM server may not (transient).
"""

from __future__ import annotations

import socket
import traceback
from pathlib import Path
from typing import Any

import httpx


class TransientError(Exception):
    """Worth retrying: timeouts, dropped connections, 5xx/429 from an LLM server, a killed worker."""


class DeterministicError(Exception):
    """Not worth retrying: bad input, broken generated code, failed validation."""


_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (TransientError, TimeoutError, ConnectionError, socket.timeout)


def is_transient(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, DeterministicError):
        return False
    if isinstance(exc, _TRANSIENT_TYPES):
        return True
    return isinstance(exc, (httpx.TransportError, httpx.TimeoutException))  # dropped connections, timeouts


def transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: retry a task run only when it failed transiently."""
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - we classify whatever the task raised
        return is_transient(exc)
    return False


# --- what a failed domain's summary says ---------------------------------------------------------
_ROOT = Path(__file__).resolve().parents[1]


def _short(filename: str) -> str:
    """A frame's file, relative to the repository, or to site-packages / the standard library."""
    path = Path(filename)
    try:
        return str(path.resolve().relative_to(_ROOT))
    except ValueError:
        pass
    parts = path.parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    for i, p in enumerate(parts):
        if p.startswith("python3"):
            return "/".join(parts[i:])
    return filename


def located(exc: BaseException) -> tuple[str, str]:
    """(where it was raised, the innermost line of our code on the way) as "file:line", "" if unknown."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    where = ours = ""
    for fr in frames:
        loc = f"{_short(fr.filename)}:{fr.lineno}"
        where = loc
        if fr.filename.startswith(str(_ROOT)) and "/.venv/" not in fr.filename:
            ours = loc
    return where, ours


def tag_stage(exc: BaseException, stage: str) -> None:
    """Remember the stage an exception came from (the innermost stage wins); it travels with the
    exception through Prefect's task state (an attribute, pickled with it)."""
    if not getattr(exc, "stage", None):
        exc.stage = stage  # type: ignore[attr-defined]


def failure(exc: BaseException, stage: str | None = None) -> dict[str, Any]:
    """A failed item for a summary: the stage, the exception type, where it was raised, and whose
    fault it is. "domain" = a DeterministicError (bad input, broken generated code, failed
    validation: the same every time); "infrastructure" = anything else (our code, the interpreter,
    the sandbox, the machine, the orchestrator), so such a failure never passes for a bad domain."""
    where, ours = located(exc)
    return {"stage": stage or getattr(exc, "stage", None) or "orchestration", "type": type(exc).__name__,
            "where": where, "our_code": ours, "message": str(exc)[:500],
            "kind": "domain" if isinstance(exc, DeterministicError) else "infrastructure"}


def error_text(exc: BaseException) -> str:
    """One line for the catalog and logs: "Type: message (at file:line)"."""
    where, ours = located(exc)
    at = where + (f", from {ours}" if ours and ours != where else "")
    return f"{type(exc).__name__}: {exc}" + (f" (at {at})" if at else "")
