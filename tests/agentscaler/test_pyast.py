"""Parsing Python from many threads at once (issue 23): CPython 3.11's `ast` keeps one depth
counter per interpreter, so concurrent parses used to fail at random with
"SystemError: AST constructor recursion depth mismatch". Every parse in the process, ours and the
libraries' (traceback formatting, inspect, literal_eval), now goes through one lock."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import agentscaler  # noqa: F401 - importing the core installs the lock
from agentscaler import pyast

SOURCE = (Path(__file__).resolve().parents[2] / "tasks" / "environments" / "plan.py").read_text()


class _Finalizer:
    """Garbage in a reference cycle whose finalizer runs Python code: while the collector runs it
    during a parse's allocations, the interpreter may hand the GIL to another thread."""

    def __del__(self) -> None:
        sum(range(20))


def _hammer(work: Callable[[], object], threads: int = 4, rounds: int = 5) -> list[str]:
    """Run `work` from several threads at once with the GIL changing hands as often as possible.

    Five rounds are plenty: with the lock taken out (`pyast._UNLOCKED_PARSE` as the work), five runs
    of five rounds each failed 3 to 4 times (measured at load 21); one round already failed once.
    With the lock in place the threads queue on it, so every round costs wall time, not exposure."""
    errors: list[str] = []

    def loop() -> None:
        for _ in range(rounds):
            for _ in range(20):
                f = _Finalizer()
                f.self = f
            try:
                work()
            except SystemError as exc:
                errors.append(str(exc))

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(100, 5, 5)
    try:
        pool = [threading.Thread(target=loop) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)
    return errors


def test_the_core_installs_the_lock():
    assert ast.parse is pyast.parse
    assert ast.literal_eval("[1, {'a': 2}]") == [1, {"a": 2}]  # literal_eval parses through it too


def test_concurrent_parses_never_fail():
    assert _hammer(lambda: ast.parse(SOURCE)) == []
    assert _hammer(lambda: pyast.parse(SOURCE)) == []


def test_concurrent_traceback_formatting_never_fails():
    """Formatting a traceback parses the failing line (to draw ^^^ under it): Prefect does that in
    a worker thread whenever a task fails, while other threads parse generated code."""

    def fail_and_format() -> None:
        try:
            {}["missing"] + [0][1]  # noqa: B018 - a line with sub-expressions to anchor
        except (KeyError, IndexError) as exc:
            traceback.format_exception(exc)
        pyast.parse(SOURCE)

    assert _hammer(fail_and_format) == []
