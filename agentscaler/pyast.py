"""Parsing Python source into an `ast` tree, safe from many threads at once (issue 23).

CPython 3.11 converts a parse tree into Python `ast` objects with one depth counter per
interpreter, not per call. When two threads parse at once (the GIL changes hands whenever an
allocation runs the garbage collector and a finalizer), they corrupt each other's count and one
fails with `SystemError: AST constructor recursion depth mismatch (before=45, after=41)`. The
build runs domains on a thread pool, and each parses generated code (the signature check, the
static check of LLM code, tau2 imports), so a large build lost a few domains at random.

Every conversion therefore takes one process-wide lock. Our code calls `parse` here;
`install()` (run when the core package is imported) also puts it in place of `ast.parse`, so
the library code that parses in our worker threads is serialized too: the standard library's
traceback formatting (it parses the failing line to draw `^^^` under it, whenever Prefect logs a
failed task), `inspect`, and `ast.literal_eval` (jinja2, rich). Compiling source text into a
code object (`compile(src, name, "exec")`) builds no Python `ast` objects and needs no lock.
A parse takes milliseconds, so the lock costs a build nothing measurable.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

# Reentrant: a finalizer that runs during a parse may format a traceback (a parse) in the same thread.
LOCK = threading.RLock()
_UNLOCKED_PARSE = ast.parse


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    """`ast.parse`, one thread at a time."""
    with LOCK:
        return _UNLOCKED_PARSE(source, filename, mode, **kwargs)


def install() -> None:
    """Make `ast.parse` (and so `ast.literal_eval`, which calls it) take the lock in this process."""
    ast.parse = parse  # type: ignore[assignment]
