"""Corpus loaders: which format a file is in, and the one entry point that reads any file.

Formats: toolbench, xlam, bfcl, openai, mcp, nestful (JSON: tasks.corpus.formats) and tau2
(Python source: tasks.corpus.tau2). `load_file` never raises on bad input (tasks.corpus.common).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tasks.corpus.common import Item, LoadIssue, Record, read_records, read_text
from tasks.corpus.formats import load_bfcl, load_mcp, load_nestful, load_openai, load_toolbench, load_xlam
from tasks.corpus.tau2 import load_tau2

FORMATS = ("toolbench", "xlam", "bfcl", "openai", "mcp", "tau2", "nestful")


def detect(obj: Any) -> str | None:
    """The format of one parsed record, or None."""
    if isinstance(obj, list):
        return detect(obj[0]) if obj else None
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("api_list"), list):
        return "toolbench"
    res = obj.get("result") if isinstance(obj.get("result"), dict) else obj
    tools = res.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict) and "inputSchema" in tools[0]:
        return "mcp"
    if "inputSchema" in obj:
        return "mcp"
    if isinstance(tools, str) or (isinstance(tools, list) and ("answers" in obj or "query" in obj)):
        return "xlam"
    if "function" in obj and ("question" in obj or "id" in obj) and isinstance(obj["function"], (list, dict)):
        return "bfcl"
    if "query_parameters" in obj or "output_parameters" in obj:
        return "nestful"
    if obj.get("type") == "function" and isinstance(obj.get("function"), dict):
        return "openai"
    if isinstance(tools, list) or isinstance(obj.get("functions"), list):
        return "openai"
    params = obj.get("parameters")
    if "name" in obj and isinstance(params, dict):
        if params.get("type") == "dict" or "response" in obj:
            return "bfcl"
        if params.get("type") == "object" or "properties" in params:
            return "openai"
        return "xlam"  # {p: {type: 'str'}} parameter maps
    return None


JSON_LOADERS: dict[str, Callable[[Path, list[Record]], Iterator[Item]]] = {
    "toolbench": load_toolbench, "xlam": load_xlam, "bfcl": load_bfcl, "openai": load_openai,
    "mcp": load_mcp, "nestful": load_nestful,
}


def load_file(path: Path, fmt: str = "auto") -> tuple[str | None, list[Item]]:
    """Read one corpus file in a format (or detect it): (format, raw tools and issues)."""
    path = Path(path)
    text, issue = read_text(path)
    if issue is not None:
        return None, [issue]
    assert text is not None
    if fmt == "tau2" or (fmt == "auto" and path.suffix == ".py"):
        return "tau2", list(load_tau2(path, text))
    items: list[Item] = []
    records: list[Record] = []
    for r in read_records(path, text):
        (records if isinstance(r, Record) else items).append(r)
    del text
    if not records:
        return (fmt if fmt != "auto" else None), items or [LoadIssue(str(path), "empty_file", "no JSON records")]
    if fmt == "auto":
        for rec in records[:20]:
            fmt_found = detect(rec.obj)
            if fmt_found:
                break
        else:
            items.append(LoadIssue(str(path), "unknown_format",
                                   "cannot tell the format (toolbench, xlam, bfcl, openai, mcp, tau2, nestful); "
                                   "pass --format"))
            return None, items
        fmt = fmt_found
    if fmt not in JSON_LOADERS:
        return None, [LoadIssue(str(path), "unknown_format", f"unknown format {fmt!r}")]
    # a JSON array of whole files (toolbench) or of rows arrives as records, one per element
    items.extend(JSON_LOADERS[fmt](path, records))
    return fmt, items
