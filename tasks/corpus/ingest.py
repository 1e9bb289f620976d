"""Corpus ingestion: files in any supported format -> one filtered, deduplicated tool corpus.

`ingest(ws, sources, fmt, strict)` is the stage (flows/ingest.py runs it as one Prefect task).
Steps: expand sources (files, folders, corpus names: tasks.corpus.sources), load each file
(tasks.corpus.loaders), normalize and filter each tool with a counted reason, give every
tool a unique function-safe name, collapse duplicates, merge with the corpus already in the
workspace, and write corpus/tools.parquet and corpus/report.json atomically.
"""

from __future__ import annotations

import keyword
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from agentscaler.artifacts import load_tools, save_tools
from agentscaler.hashing import content_hash
from agentscaler.models import Tool
from agentscaler.schemas import SchemaChecker, nesting, schema_hazard
from agentscaler.workspace import Workspace, atomic_write_json
from tasks.corpus.common import MAX_DEPTH, LoadIssue, RawTool
from tasks.corpus.loaders import FORMATS, load_file
from tasks.corpus.sources import expand_sources

MAX_PARAMS = 50  # more top-level parameters than this is not an API a model should learn from
MAX_DESCRIPTION = 8000  # characters
MAX_SPEC_BYTES = 256 * 1024  # canonical JSON of parameters + returns
MIN_DESCRIPTION_CHARS = 8
MAX_ERRORS_KEPT = 500

# rejection reasons that mean "malformed input" (listed in errors, fail --strict);
# the others are quality filters from the paper (counted, not errors)
MALFORMED = {"unreadable_file", "empty_file", "malformed_json", "malformed_tool", "unknown_format",
             "invalid_schema", "unnamed_parameter", "duplicate_parameter", "bad_name", "too_deep", "oversized",
             # schemas whose checks would not end or could take minutes (agentscaler.schemas.schema_hazard)
             "bad_ref", "cyclic_ref", "ref_fanout", "unsafe_pattern"}
QUALITY = {"no_description", "trivial_description", "too_many_parameters", "duplicate"}

class IngestError(RuntimeError):
    """The existing corpus cannot be read; nothing is overwritten."""


# ---------------------------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------------------------

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]+")
_MULTI_US = re.compile(r"_+")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def normalize_name(source_name: str) -> str | None:
    """A Python-identifier tool name (tool code defines one function per tool, named as the tool):
    non [A-Za-z0-9_] runs become '_', long names are cut and suffixed with a hash. A name spelled
    with anything but ASCII (a zero-width space, fullwidth or look-alike letters) folds to ASCII
    (NFKC) and always carries a hash of its spelling, so it never takes the plain name of the tool
    it looks like. None if nothing identifier-like is left (empty, only symbols or non-Latin
    letters, starts with a digit)."""
    source_name = source_name or ""
    folded = source_name if source_name.isascii() else unicodedata.normalize("NFKC", source_name)
    s = _MULTI_US.sub("_", _NON_IDENT.sub("_", folded)).strip("_")
    if not s:
        return None
    if keyword.iskeyword(s):
        s += "_"
    if not source_name.isascii():
        s = s[:55].rstrip("_") + "_" + content_hash(source_name, 8)
    elif len(s) > 64:
        s = s[:55].rstrip("_") + "_" + content_hash(source_name, 8)
    return s if _IDENT.match(s) else None


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------

def type_label(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "invalid"
    t = schema.get("type")
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        return "|".join(sorted(map(str, t)))
    if "enum" in schema:
        return "enum"
    if "anyOf" in schema or "oneOf" in schema:
        return "union"
    return "any"


@dataclass
class Candidate:
    raw: RawTool
    name: str  # base name (before collision suffixes)
    key: str  # hash of the normalized spec with the base name (the dedup key)
    parameters: dict[str, Any]
    returns: dict[str, Any] | None


def check_tool(raw: RawTool, checker: SchemaChecker) -> tuple[Candidate | None, str | None, str | None]:
    """Normalize one raw tool: (candidate, None, None) or (None, reason, message)."""
    if raw.problem:
        reason, _, msg = raw.problem.partition(": ")
        return None, reason, msg or reason
    name = normalize_name(raw.source_name)
    if name is None:
        return None, "bad_name", f"name {raw.source_name[:80]!r} has no identifier characters after normalization"
    desc = raw.description.strip()
    if not desc:
        return None, "no_description", "no description"
    if len(desc) > MAX_DESCRIPTION:
        return None, "oversized", f"description has {len(desc)} characters (limit {MAX_DESCRIPTION})"
    words = re.findall(r"\w+", desc)
    if len(desc) < MIN_DESCRIPTION_CHARS or len(words) < 2 or desc.lower().replace(" ", "_") in (
            name.lower(), raw.source_name.lower()):
        return None, "trivial_description", f"trivial description {desc[:60]!r}"
    params = raw.parameters
    if not isinstance(params, dict):
        return None, "invalid_schema", "parameters is not a JSON object"
    if nesting(params, MAX_DEPTH + 2) > MAX_DEPTH + 1:
        return None, "too_deep", f"parameters nest deeper than {MAX_DEPTH} levels"
    if params.get("type", "object") != "object":
        return None, "invalid_schema", f"parameters type is {params.get('type')!r}, not 'object'"
    props = params.get("properties", {})
    if not isinstance(props, dict):
        return None, "invalid_schema", "'properties' is not an object"
    params = {"type": "object", **params, "properties": props}
    names = raw.param_names if raw.param_names is not None else list(props)
    if any(not isinstance(n, str) or not n.strip() for n in names):
        return None, "unnamed_parameter", "a parameter has no name"
    dup = [n for n, c in Counter(names).items() if c > 1]
    if dup:
        return None, "duplicate_parameter", f"parameter {dup[0]!r} declared {Counter(names)[dup[0]]} times"
    if len(props) > MAX_PARAMS:
        return None, "too_many_parameters", f"{len(props)} parameters (limit {MAX_PARAMS})"
    req = params.get("required")
    if req is not None and not (isinstance(req, list) and all(isinstance(r, str) for r in req)):
        return None, "invalid_schema", "'required' is not a list of names"
    if isinstance(req, list):
        missing = [r for r in req if r not in props]
        if missing:
            return None, "invalid_schema", f"required parameter {missing[0]!r} is not among the properties"
        if len(set(req)) != len(req):
            params["required"] = list(dict.fromkeys(req))
    returns = raw.returns if isinstance(raw.returns, dict) and raw.returns else None
    if returns is not None and (nesting(returns, MAX_DEPTH + 2) > MAX_DEPTH + 1 or schema_hazard(returns)):
        returns = None
    try:  # orjson also refuses lone surrogates and >64-bit ints, which could not be written back
        p_text = orjson.dumps(params)
        r_text = orjson.dumps(returns) if returns is not None else b""
        for text in (desc, raw.source_name, raw.category or ""):
            text.encode("utf-8")
    except (RecursionError, ValueError, TypeError, UnicodeEncodeError, orjson.JSONEncodeError) as exc:
        return None, "invalid_schema", f"not serializable as UTF-8 JSON: {str(exc)[:200]}"
    if len(p_text) + len(r_text) > MAX_SPEC_BYTES:
        return None, "oversized", f"schema is {len(p_text) + len(r_text)} bytes (limit {MAX_SPEC_BYTES})"
    hazard = schema_hazard(params)
    if hazard:
        return None, hazard[0], f"parameters: {hazard[1]}"
    err = checker.error(params)
    if err:
        return None, "invalid_schema", f"parameters are not valid JSON Schema: {err}"
    if returns is not None and checker.error(returns):
        returns = None  # an unusable output spec is dropped, the tool is kept
    key = content_hash({"name": name, "description": desc, "parameters": params, "returns": returns})
    return Candidate(raw=raw, name=name, key=key, parameters=params, returns=returns), None, None


# ---------------------------------------------------------------------------------------------
# explicit input/output spec (rule-based returns, off by default: it changes tool ids)
# ---------------------------------------------------------------------------------------------

_RETURN_RULES: list[tuple[re.Pattern[str], dict[str, Any]]] = [
    (re.compile(r"^(is|has|check|can|validate|verify|exists?)_|^(is|has|can)[A-Z]", re.I), {"type": "boolean"}),
    (re.compile(r"^(count|calculate|compute|sum|average|total|get_?count|num)", re.I), {"type": "number"}),
    (re.compile(r"^(list|search|find|query|get_all|fetch_all|browse|filter|lookup_all)", re.I),
     {"type": "array", "items": {"type": "object"}}),
    (re.compile(r"^(create|add|book|place|insert|register|submit|send|make|post)", re.I),
     {"type": "object", "properties": {"id": {"type": "string"}, "status": {"type": "string"}}}),
    (re.compile(r"^(update|set|modify|change|edit|cancel|delete|remove|toggle|enable|disable)", re.I),
     {"type": "object", "properties": {"success": {"type": "boolean"}}}),
    (re.compile(r"^(get|fetch|retrieve|read|show|describe|lookup|view)", re.I), {"type": "object"}),
]


def infer_returns(name: str, description: str) -> dict[str, Any]:
    """A rule-based output spec from the tool's name (and description), for tools that lack one."""
    for pattern, schema in _RETURN_RULES:
        if pattern.search(name):
            return {**schema, "description": "inferred from the tool name"}
    if re.search(r"\b(returns?|lists?) (a |the )?(list|array)\b", description, re.I):
        return {"type": "array", "description": "inferred from the description"}
    return {"type": "object", "description": "inferred (no rule matched)"}


# ---------------------------------------------------------------------------------------------
# sources
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# assembling the corpus
# ---------------------------------------------------------------------------------------------

def _assign_names(cands: list[Candidate], taken: set[str]) -> list[tuple[Candidate, str]]:
    """Unique names, deterministic for a given set: a tool whose source name is exactly its base
    name claims it first, then the others in key order; a later collision gets `_<6 hex of its
    key>` (then 10 hex, then the whole key)."""
    out = []
    for c in sorted(cands, key=lambda c: (c.raw.source_name != c.name, c.key)):
        name = c.name
        for n in (6, 10, 16):
            if name not in taken:
                break
            name = c.name[: 63 - n].rstrip("_") + "_" + c.key[:n]
        taken.add(name)
        out.append((c, name))
    return out


def build_corpus(items: Iterable[RawTool | LoadIssue], existing: list[Tool] | None = None,
                 add_returns: bool = False) -> tuple[list[Tool], list[Tool], dict[str, Any]]:
    """Filter, name and dedupe raw tools against an existing corpus.

    Returns (all tools after the merge, the new ones, report). Existing tools keep their names."""
    existing = existing or []
    checker = SchemaChecker()
    rejected: Counter[str] = Counter()
    errors: list[str] = []
    accepted: dict[str, Candidate] = {}
    for it in items:
        if isinstance(it, LoadIssue):
            rejected[it.reason] += 1
            errors.append(f"{it.where}: {it.reason}: {it.message}")
            continue
        cand, reason, msg = check_tool(it, checker)
        if cand is None:
            assert reason is not None
            rejected[reason] += 1
            if reason in MALFORMED:
                errors.append(f"{it.where}: {reason}: {msg}")
            continue
        if add_returns and cand.returns is None:
            cand.returns = infer_returns(cand.name, cand.raw.description)
            cand.key = content_hash({"name": cand.name, "description": cand.raw.description.strip(),
                                     "parameters": cand.parameters, "returns": cand.returns})
        if cand.key in accepted:
            rejected["duplicate"] += 1
            continue
        accepted[cand.key] = cand
    # keys of the existing corpus, so a re-ingest adds nothing twice
    existing_keys: set[str] = set()
    for t in existing:
        base = normalize_name(t.source_name) or t.name
        existing_keys.add(content_hash({"name": base, "description": t.description.strip(),
                                        "parameters": t.parameters, "returns": t.returns}))
        existing_keys.add(t.id)
    fresh = [c for k, c in accepted.items() if k not in existing_keys]
    taken = {t.name for t in existing}
    new_tools = []
    for c, name in _assign_names(fresh, taken):
        r = c.raw
        new_tools.append(Tool(name=name, source_name=r.source_name, source=r.source,
                              description=r.description.strip(), parameters=c.parameters, returns=c.returns,
                              category=r.category or None, kind=r.kind if r.kind in ("read", "write") else None).with_id())
    all_tools = sorted([*existing, *new_tools], key=lambda t: t.name)
    sources = Counter(c.raw.source for c in accepted.values())
    param_types: Counter[str] = Counter()
    for c in accepted.values():
        for schema in c.parameters["properties"].values():
            param_types[type_label(schema)] += 1
    report = {
        "accepted": len(accepted),
        "rejected": dict(sorted(rejected.items())),
        "sources": dict(sorted(sources.items())),
        "param_types": dict(param_types.most_common()),
        "errors": errors[:MAX_ERRORS_KEPT],
        "errors_total": len(errors),
        "new": len(new_tools),
        "total": len(all_tools),
    }
    return all_tools, new_tools, report


def ingest(ws: Workspace, sources: Iterable[str | Path], fmt: str = "auto", strict: bool = False,
           add_returns: bool = False) -> dict[str, Any]:
    """Ingest corpus files into ws/corpus/tools.parquet (merged, deduplicated) and write the report.

    Bad files, lines and tools are reported and skipped. With strict, any malformed input means
    nothing is written and report["ok"] is False; with nothing accepted at all, ok is False too."""
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}")
    files, items_pre = expand_sources(sources)
    items: list[RawTool | LoadIssue] = list(items_pre)
    by_format: Counter[str] = Counter()
    for f in files:
        found, got = load_file(f, fmt)
        by_format[found or "unrecognized"] += 1
        items.extend(got)
    existing: list[Tool] = []
    if ws.tools_path.exists():
        try:
            existing = load_tools(ws.tools_path)
        except Exception as exc:  # noqa: BLE001
            raise IngestError(f"{ws.tools_path}: cannot read the existing corpus ({exc}); not overwriting it") from exc
    all_tools, new_tools, report = build_corpus(items, existing, add_returns=add_returns)
    report["files"] = {"read": len(files), "by_format": dict(sorted(by_format.items()))}
    ok = report["accepted"] > 0 and not (strict and report["errors_total"])
    report["ok"] = ok
    if strict and report["errors_total"]:
        report["written"] = False
        return report
    if new_tools:
        save_tools(ws.tools_path, all_tools)
    report["written"] = True
    atomic_write_json(ws.corpus_report_path, report)
    return report


def format_report(report: dict[str, Any]) -> str:
    """A short human summary for the CLI."""
    lines = [f"accepted {report['accepted']} tools ({report.get('new', 0)} new, corpus total {report.get('total', 0)})"]
    if report["sources"]:
        lines.append("sources: " + ", ".join(f"{k}={v}" for k, v in report["sources"].items()))
    if report["rejected"]:
        lines.append("rejected: " + ", ".join(f"{k}={v}" for k, v in report["rejected"].items()))
    if report.get("param_types"):
        lines.append("parameter types: " + ", ".join(f"{k}={v}" for k, v in list(report["param_types"].items())[:10]))
    return "\n".join(lines)


__all__ = ["ingest", "build_corpus", "check_tool", "normalize_name", "infer_returns", "format_report", "IngestError"]
