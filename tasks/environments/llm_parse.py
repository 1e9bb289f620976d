"""Strict reading of the LLM synthesizer's replies, and static checks of its code (data and text only).

A reply must be exactly what was asked: the tables JSON (checked against a JSON Schema and
envs.spec.TableSpec), one ```python block of tool code, the rows JSON (checked against the
tables). A malformed reply is a StepError with its raw text kept, never repaired into data.
Generated code is only `compile()`d and walked as an AST here: what it may import, name and reach
(tasks.environments.codecheck) is checked before it can reach the sandbox.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from agentscaler import pyast
from agentscaler.llm import LLMFormatError, parse_json_reply
from agentscaler.naming import ascii_identifier
from envs.spec import TableSpec, ToolSpec
from tasks.environments.codecheck import ALLOWED, code_problems
from tasks.environments.validate import check_signature, functions

ALLOWED_IMPORTS = frozenset(ALLOWED)  # (tasks.environments.codecheck: the names allowed from each)
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)\n?```", re.DOTALL)


class StepError(Exception):
    """One step's reply was unusable: what is wrong, which step, and the raw reply kept as sent."""

    def __init__(self, step: str, message: str, raw: str | None = None):
        super().__init__(message)
        self.step, self.raw = step, raw


TABLES_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["tables", "tools"],
    "properties": {
        "tables": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "primary_key", "columns"],
            "properties": {
                "name": {"type": "string"},
                "primary_key": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "columns": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["name", "type"],
                    "properties": {"name": {"type": "string"},
                                   "type": {"enum": ["integer", "real", "text", "boolean", "json"]},
                                   "nullable": {"type": "boolean"},
                                   "foreign_key": {"type": ["string", "null"]}}}}}}},
        "tools": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "kind"],
            "properties": {"name": {"type": "string"}, "kind": {"enum": ["read", "write"]}}}}}}


def parse_tables(text: str | None, tool_names: list[str]) -> tuple[list[TableSpec], dict[str, str]]:
    """The tables reply -> (TableSpecs, tool name -> kind). Raises StepError naming the problem."""
    try:
        value = parse_json_reply(text, TABLES_SCHEMA)
    except LLMFormatError as exc:
        raise StepError("tables", str(exc), text) from None
    problems: list[str] = []
    tables: list[TableSpec] = []
    for i, t in enumerate(value["tables"]):
        try:
            tables.append(TableSpec.model_validate(t))
        except ValidationError as exc:
            problems.append(f"tables[{i}]: {exc.errors()[0]['msg']}")
    by_name = {t.name: t for t in tables}
    if len(by_name) != len(tables):
        problems.append("duplicate table names")
    for t in tables:
        cols = [c.name for c in t.columns]
        for n in [t.name, *cols]:
            if not ascii_identifier(n):
                problems.append(f"name {n!r} (table {t.name}) is not a plain ASCII identifier")
        if len(set(cols)) != len(cols):
            problems.append(f"table {t.name}: duplicate column names")
        missing = [k for k in t.primary_key if k not in cols]
        if missing:
            problems.append(f"table {t.name}: primary key columns {missing} are not columns")
        for c in t.columns:
            if c.foreign_key:
                ref_t, _, ref_c = c.foreign_key.partition(".")
                if ref_t not in by_name or ref_c not in [x.name for x in by_name[ref_t].columns]:
                    problems.append(f"{t.name}.{c.name}: foreign key {c.foreign_key!r} names no column")
    kinds = {x["name"]: x["kind"] for x in value["tools"]}
    missing_tools = [n for n in tool_names if n not in kinds]
    unknown = [n for n in kinds if n not in tool_names]
    if missing_tools:
        problems.append(f"tools without a kind: {missing_tools}")
    if unknown:
        problems.append(f"unknown tools: {unknown}")
    if problems:
        raise StepError("tables", "; ".join(problems), text)
    return tables, kinds


def extract_code(text: str | None) -> str:
    """The reply must be exactly one ```python fenced block (whitespace around it only)."""
    if not text or not text.strip():
        raise StepError("code", "empty reply: expected one ```python fenced block", text)
    blocks = list(_FENCE.finditer(text))
    if len(blocks) != 1:
        raise StepError("code", f"expected exactly one ```python fenced block, found {len(blocks)}", text)
    outside = (text[:blocks[0].start()] + text[blocks[0].end():]).strip()
    if outside:
        raise StepError("code", f"text outside the code block: {outside[:120]!r}", text)
    return blocks[0].group(1) + "\n"


def static_check(code: str, tools: list[ToolSpec]) -> list[str]:
    """Problems of generated tool code found without running it: syntax (compile only), then what the
    code may spell, import, name and reach (tasks.environments.codecheck), then missing functions
    and signatures."""
    try:
        compile(code, "tools.py", "exec", dont_inherit=True)  # syntax only: the code object is dropped
        tree = pyast.parse(code)
    except (SyntaxError, ValueError) as exc:
        return [f"syntax error line {getattr(exc, 'lineno', '?')}: {getattr(exc, 'msg', exc)}"]
    problems = code_problems(tree, code)
    if problems:
        return problems
    fns = functions(tree)
    for t in tools:
        fn = fns.get(t.name)
        if fn is None:
            problems.append(f"no function for tool {t.name}")
        elif (p := check_signature(fn, t)) is not None:
            problems.append(f"tool {t.name}: {p}")
    return problems


_PY = {"integer": (int,), "real": (int, float), "text": (str,), "boolean": (bool,), "json": (dict, list)}


def rows_schema(tables: list[TableSpec], n_rows: int) -> dict[str, Any]:
    """JSON Schema of the rows reply, derived from the tables (so a grammar can constrain it)."""
    js = {"integer": "integer", "real": "number", "text": "string", "boolean": "boolean"}
    props = {}
    for t in tables:
        cols = {}
        for c in t.columns:
            s: dict[str, Any] = {"type": [js[c.type], "null"] if c.nullable else js[c.type]} if c.type in js else {}
            cols[c.name] = s
        props[t.name] = {"type": "array", "minItems": 1, "maxItems": max(n_rows * 3, 10),
                         "items": {"type": "object", "properties": cols, "required": list(t.primary_key),
                                   "additionalProperties": False}}
    return {"type": "object", "additionalProperties": False, "required": ["rows"],
            "properties": {"rows": {"type": "object", "properties": props, "required": [t.name for t in tables],
                                    "additionalProperties": False}}}


def parse_rows(text: str | None, tables: list[TableSpec], n_rows: int = 4) -> dict[str, list[dict[str, Any]]]:
    """The rows reply -> rows per table (types, unique primary keys, foreign keys that resolve)."""
    try:
        value = parse_json_reply(text, rows_schema(tables, n_rows))
    except LLMFormatError as exc:
        raise StepError("rows", str(exc), text) from None
    rows: dict[str, list[dict[str, Any]]] = value["rows"]
    problems: list[str] = []
    for t in tables:
        seen = set()
        for i, r in enumerate(rows[t.name]):
            for c in t.columns:
                v = r.get(c.name)
                if v is None:
                    if not c.nullable or c.name in t.primary_key:
                        problems.append(f"{t.name}[{i}].{c.name} is null")
                elif not isinstance(v, _PY[c.type]) or (c.type != "boolean" and isinstance(v, bool)):
                    problems.append(f"{t.name}[{i}].{c.name}: {v!r} is not {c.type}")
            key = tuple(json.dumps(r.get(k), sort_keys=True) for k in t.primary_key)
            if key in seen:
                problems.append(f"{t.name}[{i}]: duplicate primary key {key}")
            seen.add(key)
    by_name = {t.name: t for t in tables}
    for t in tables:
        for c in t.columns:
            if not c.foreign_key:
                continue
            ref_t, _, ref_c = c.foreign_key.partition(".")
            have = {json.dumps(r.get(ref_c)) for r in rows.get(ref_t, [])} if ref_t in by_name else set()
            for i, r in enumerate(rows[t.name]):
                if r.get(c.name) is not None and json.dumps(r[c.name]) not in have:
                    problems.append(f"{t.name}[{i}].{c.name}={r[c.name]!r} is not in {c.foreign_key}")
    if problems:
        raise StepError("rows", "; ".join(problems[:12]), text)
    return rows
