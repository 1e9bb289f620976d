"""What every corpus loader shares: the raw tool and issue records, and reading a file safely.

A loader never raises on bad input: it yields `RawTool` for what it could read and `LoadIssue`
(naming the file, line or tool and the reason) for what it could not. Normalization, filtering,
naming and dedup happen afterwards in `tasks.corpus.ingest`, so every format is judged by one
rule book.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

MAX_FILE_BYTES = 512 * 1024 * 1024  # refuse to read anything larger (a corpus file, not a disk image)
MAX_DEPTH = 24  # JSON Schema nesting we convert; deeper is cut (returns) or rejected (parameters)
RETURNS_DEPTH = 4  # output specs (ComplexFuncBench) nest 39 levels; keep the useful top


@dataclass
class RawTool:
    """A tool as read from a corpus, before normalization and filtering."""

    source_name: str
    source: str
    description: str
    parameters: Any  # should be a JSON Schema object; checked later
    where: str  # file[:line] or file[index], for messages
    returns: dict[str, Any] | None = None
    category: str | None = None
    kind: str | None = None
    param_names: list[str] | None = None  # declared names in order, when the format can repeat them
    problem: str | None = None  # a conversion problem found while loading (reason code: message)


@dataclass
class LoadIssue:
    """A file, line or tool that could not be read at all."""

    where: str
    reason: str  # code: unreadable_file | malformed_json | malformed_tool | unknown_format | empty_file
    message: str


@dataclass
class Record:
    where: str
    obj: Any


Item = RawTool | LoadIssue


# orjson: 3-5x faster than json, and strict where corpora are not: it rejects NaN/Infinity, lone
# surrogates (they could not be written back as UTF-8) and nesting deeper than 1024 levels.
loads = orjson.loads


def read_text(path: Path) -> tuple[str | None, LoadIssue | None]:
    """UTF-8 text of a file, or an issue saying why not (binary, not UTF-8, too big, empty)."""
    where = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, LoadIssue(where, "unreadable_file", f"file is {size} bytes, over the {MAX_FILE_BYTES} limit")
        data = path.read_bytes()
    except OSError as exc:
        return None, LoadIssue(where, "unreadable_file", f"cannot read: {exc}")
    if b"\x00" in data[:8192]:
        return None, LoadIssue(where, "unreadable_file", "binary file (NUL bytes), not JSON or Python text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, LoadIssue(where, "unreadable_file", f"not UTF-8: byte {exc.start}: {exc.reason}")
    if not text.strip():
        return None, LoadIssue(where, "empty_file", "empty file")
    return text, None


def read_records(path: Path, text: str) -> Iterator[Record | LoadIssue]:
    """JSON records of a file: a JSON array (one record per element), one object, or JSON Lines."""
    where = str(path)
    stripped = text.lstrip()
    try:
        obj = loads(stripped)
    except (json.JSONDecodeError, RecursionError) as exc:
        if isinstance(exc, json.JSONDecodeError) and exc.msg.startswith("unexpected content after document") \
                and stripped[:1] == "{":
            yield from _read_jsonl(path, text)
            return
        yield LoadIssue(where, "malformed_json", json_error_message(exc))
        return
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            yield Record(f"{where}[{i}]", item)
    else:
        yield Record(where, obj)


def _read_jsonl(path: Path, text: str) -> Iterator[Record | LoadIssue]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield Record(where, loads(line))
        except (json.JSONDecodeError, RecursionError) as exc:
            yield LoadIssue(where, "malformed_json", json_error_message(exc))


def json_error_message(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to parse"
    if isinstance(exc, json.JSONDecodeError):
        bad = exc.doc[exc.pos:exc.pos + 9] if isinstance(exc.doc, str) else ""
        if bad.startswith(("NaN", "Infinity", "-Infinity")):
            return f"invalid JSON: NaN/Infinity is not a JSON value, at line {exc.lineno} column {exc.colno}"
        return f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    return f"invalid JSON: {exc}"
