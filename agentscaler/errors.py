"""Error classes that decide retries: transient errors are retried with backoff, others are not.

A domain whose generated code is broken fails the same way every time (deterministic); a
dropped connection to the LLM server may not (transient).
"""

from __future__ import annotations

import socket
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
