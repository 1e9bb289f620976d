"""Corpus loaders: one plain function per format, each turning a file into raw tools.

A loader never raises on bad input: it yields `RawTool` for what it could read and `LoadIssue`
(naming the file, line or tool and the reason) for what it could not. Normalization, filtering,
naming and dedup happen afterwards in `tasks.corpus.ingest`, so every format is judged by one rule book.

Formats: toolbench (RapidAPI tool JSON with `api_list`), xlam (APIGen function-calling rows whose
`tools` is a JSON string with Python-style types), bfcl (JSON Lines rows with `function`, or one
function doc per line), openai (tool/function JSON), mcp (`tools/list` results), tau2 (a domain's
`tools.py`, parsed with `ast`, never imported), nestful (`*-spec.json` lists).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FORMATS = ("toolbench", "xlam", "bfcl", "openai", "mcp", "tau2", "nestful")
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
_loads = orjson.loads


# ---------------------------------------------------------------------------------------------
# reading files
# ---------------------------------------------------------------------------------------------

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
        obj = _loads(stripped)
    except (json.JSONDecodeError, RecursionError) as exc:
        if isinstance(exc, json.JSONDecodeError) and exc.msg.startswith("unexpected content after document") \
                and stripped[:1] == "{":
            yield from _read_jsonl(path, text)
            return
        yield LoadIssue(where, "malformed_json", _json_msg(exc))
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
            yield Record(where, _loads(line))
        except (json.JSONDecodeError, RecursionError) as exc:
            yield LoadIssue(where, "malformed_json", _json_msg(exc))


def _json_msg(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to parse"
    if isinstance(exc, json.JSONDecodeError):
        bad = exc.doc[exc.pos:exc.pos + 9] if isinstance(exc.doc, str) else ""
        if bad.startswith(("NaN", "Infinity", "-Infinity")):
            return f"invalid JSON: NaN/Infinity is not a JSON value, at line {exc.lineno} column {exc.colno}"
        return f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    return f"invalid JSON: {exc}"


# ---------------------------------------------------------------------------------------------
# types -> JSON Schema
# ---------------------------------------------------------------------------------------------

_SCALARS: dict[str, dict[str, Any]] = {}
for _names, _schema in (
    (("string", "str", "text", "char", "character", "enum", "geopoint", "time", "file", "password", "email",
      "url", "uri", "bytes", "binary", "credentials", "secret"), {"type": "string"}),
    (("date",), {"type": "string", "format": "date"}),
    (("datetime", "date-time", "timestamp"), {"type": "string", "format": "date-time"}),
    (("number", "float", "double", "decimal", "numeric", "real"), {"type": "number"}),
    (("integer", "int", "long", "short", "byte", "bigint", "int32", "int64"), {"type": "integer"}),
    (("boolean", "bool"), {"type": "boolean"}),
    (("array", "list", "tuple", "set", "arraylist", "sequence", "iterable", "frozenset"), {"type": "array"}),
    (("object", "dict", "map", "hashmap", "json", "mapping", "dictionary"), {"type": "object"}),
    (("null", "none", "nonetype"), {"type": "null"}),
    (("any", "anytype", "object?", "callable", "function"), {}),
):
    for _n in _names:
        _SCALARS[_n] = _schema


def simple_type(name: Any) -> dict[str, Any] | None:
    """JSON Schema for a type name as corpora spell it (STRING, float, dict, HashMap, DATE (YYYY-MM-DD))."""
    if not isinstance(name, str):
        return None
    key = name.strip().split(" (")[0].split("(")[0].strip().lower()
    found = _SCALARS.get(key)
    return dict(found) if found is not None else None


_JSON_SAFE = (str, int, float, bool, type(None))


def _json_safe(v: Any, depth: int = 0) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, _JSON_SAFE):
        return True
    if depth > 8:
        return False
    if isinstance(v, list):
        return all(_json_safe(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _json_safe(x, depth + 1) for k, x in v.items())
    return False


class SchemaDepthError(ValueError):
    pass


def to_schema(node: Any, depth: int = 0, max_depth: int = MAX_DEPTH, cut: bool = False) -> dict[str, Any]:
    """Convert a JSON-Schema-like property spec from any JSON corpus (BFCL dict/float/any, NESTFUL
    `allowed_values`, ComplexFuncBench empty `title`/`enum`) into Draft 2020-12 JSON Schema.

    Beyond max_depth: raise SchemaDepthError, or return {} when cut (used for output specs)."""
    if depth > max_depth:
        if cut:
            return {}
        raise SchemaDepthError(f"schema nested deeper than {max_depth} levels")
    if not isinstance(node, dict):
        t = simple_type(node)
        return t if t is not None else {}
    out: dict[str, Any] = {}
    typ = node.get("type")
    if isinstance(typ, list):
        kinds = [simple_type(t) for t in typ]
        names = sorted({k["type"] for k in kinds if k and "type" in k})
        if names:
            out["type"] = names[0] if len(names) == 1 else names
    elif typ is not None:
        st = simple_type(typ)
        if st is not None:  # an unknown type name (e.g. "String[]") is left unconstrained
            out.update(st)
    desc = node.get("description")
    if isinstance(desc, str) and desc.strip():
        out["description"] = desc.strip()
    enum = node.get("enum") or node.get("allowed_values")
    if isinstance(enum, list) and enum and all(_json_safe(x) for x in enum):
        seen: list[Any] = []
        for x in enum:
            if x not in seen:
                seen.append(x)
        out["enum"] = seen
    default = node.get("default", node.get("default_value"))  # NESTFUL/SGD say default_value
    if default is not None and _json_safe(default):
        out["default"] = default
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt:
        out["format"] = fmt
    items = node.get("items")
    if isinstance(items, dict) and items:
        out["items"] = to_schema(items, depth + 1, max_depth, cut)
        out.setdefault("type", "array")
    props = node.get("properties")
    if isinstance(props, dict) and props:
        out["properties"] = {str(k): to_schema(v, depth + 1, max_depth, cut) for k, v in props.items()}
        out.setdefault("type", "object")
        req = node.get("required")
        if isinstance(req, list):
            names = [r for r in req if isinstance(r, str)]
            if names:
                out["required"] = list(dict.fromkeys(names))
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_schema(node["additionalProperties"], depth + 1, max_depth, cut)
    return out


def object_schema(props: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": [r for r in dict.fromkeys(required) if r in props]}


# Python-style annotations (xLAM strings, tau2 annotations) ----------------------------------

_PY_CONTAINERS = {"list": "array", "sequence": "array", "set": "array", "tuple": "array", "iterable": "array",
                  "frozenset": "array", "dict": "object", "mapping": "object"}


def annotation_schema(node: ast.AST | None, resolve: Callable[[str, int], dict[str, Any] | None] | None = None,
                      depth: int = 0) -> dict[str, Any]:
    """JSON Schema of a Python type annotation AST (List[int], Optional[str], Literal['a'], X | None)."""
    if node is None or depth > 12:
        return {}
    if isinstance(node, ast.Constant):
        if node.value is None:
            return {"type": "null"}
        if isinstance(node.value, str):  # a string annotation: parse it
            try:
                return annotation_schema(ast.parse(node.value, mode="eval").body, resolve, depth + 1)
            except SyntaxError:
                return simple_type(node.value) or {}
        return {}
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = node.id if isinstance(node, ast.Name) else node.attr
        st = simple_type(name)
        if st is not None:
            return st
        if resolve is not None:
            found = resolve(name, depth)
            if found is not None:
                return found
        return {}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union([annotation_schema(node.left, resolve, depth + 1), annotation_schema(node.right, resolve, depth + 1)])
    if isinstance(node, ast.Subscript):
        base = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        low = base.lower()
        if low == "optional":
            return annotation_schema(args[0], resolve, depth + 1)
        if low == "union":
            return _union([annotation_schema(a, resolve, depth + 1) for a in args])
        if low == "literal":
            vals = [a.value for a in args if isinstance(a, ast.Constant) and _json_safe(a.value)]
            out: dict[str, Any] = {"enum": vals}
            kinds = {type(v) for v in vals}
            if kinds == {str}:
                out["type"] = "string"
            elif kinds and kinds <= {int}:
                out["type"] = "integer"
            return out
        if low == "annotated":
            inner = annotation_schema(args[0], resolve, depth + 1)
            for a in args[1:]:
                desc = _field_description(a)
                if desc:
                    inner = {**inner, "description": desc}
            return inner
        if low in _PY_CONTAINERS:
            kind = _PY_CONTAINERS[low]
            if kind == "array":
                out = {"type": "array"}
                if args and not (isinstance(args[-1], ast.Constant) and args[-1].value is Ellipsis):
                    item = annotation_schema(args[0], resolve, depth + 1)
                    if item:
                        out["items"] = item
                return out
            out = {"type": "object"}
            if len(args) == 2:
                val = annotation_schema(args[1], resolve, depth + 1)
                if val:
                    out["additionalProperties"] = val
            return out
        return annotation_schema(node.value, resolve, depth + 1)
    return {}


def _union(parts: list[dict[str, Any]]) -> dict[str, Any]:
    parts = [p for p in parts if p != {"type": "null"}]
    if not parts:
        return {"type": "null"}
    if any(p == {} for p in parts):
        return {}
    if len(parts) == 1:
        return parts[0]
    if all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
        return {"type": sorted({p["type"] for p in parts})}
    uniq: list[dict[str, Any]] = []
    for p in parts:
        if p not in uniq:
            uniq.append(p)
    return {"anyOf": uniq} if len(uniq) > 1 else uniq[0]


def _field_description(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg == "description" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value
    return None


_OPTIONAL_RE = re.compile(r"[,\s]*\boptional\b\s*$", re.I)


def py_type_schema(text: Any) -> tuple[dict[str, Any], bool]:
    """xLAM-style type text -> (schema, optional): 'str', 'List[int]', 'str, optional', 'int or float'."""
    if not isinstance(text, str) or not text.strip():
        return {}, False
    t = text.strip()
    optional = bool(_OPTIONAL_RE.search(t))
    t = _OPTIONAL_RE.sub("", t).strip()
    if " or " in t:
        return _union([py_type_schema(p)[0] for p in t.split(" or ")]), optional
    try:
        node = ast.parse(t, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return simple_type(t) or {}, optional
    if isinstance(node, ast.Subscript):
        base = node.value.id if isinstance(node.value, ast.Name) else ""
        if base.lower() == "optional":
            optional = True
    return annotation_schema(node, None), optional


# ---------------------------------------------------------------------------------------------
# the loaders
# ---------------------------------------------------------------------------------------------

def _str(v: Any) -> str:
    return v.strip() if isinstance(v, str) else ""


def _issue_tool(where: str, msg: str) -> LoadIssue:
    return LoadIssue(where, "malformed_tool", msg)


def _category_from_path(path: Path) -> str | None:
    parent = path.parent.name
    return parent or None


def load_toolbench(path: Path, records: list[Record]) -> Iterator[Item]:
    """ToolBench (RapidAPI) tool files: {tool_name, tool_description, api_list: [{name, description,
    required_parameters: [{name, type, description, default}], optional_parameters: [...]}]}.
    Function name as in ToolBench: `<api>_for_<tool>`; category = the file's folder (toolenv/tools/<Category>/)."""
    for rec in records:
        tool = rec.obj
        if not isinstance(tool, dict) or not isinstance(tool.get("api_list"), list):
            yield _issue_tool(rec.where, "ToolBench tool must be an object with an 'api_list' list")
            continue
        tool_name = _str(tool.get("tool_name") or tool.get("standardized_name") or tool.get("name") or tool.get("title"))
        category = _str(tool.get("category") or tool.get("category_name")) or _category_from_path(path)
        for i, api in enumerate(tool["api_list"]):
            where = f"{rec.where} api_list[{i}]"
            if not isinstance(api, dict):
                yield _issue_tool(where, "api entry is not an object")
                continue
            api_name = _str(api.get("name") or api.get("api_name"))
            where = f"{where} ({tool_name}/{api_name})"
            props: dict[str, Any] = {}
            required: list[str] = []
            names: list[str] = []
            problem = None
            for group, is_req in (("required_parameters", True), ("optional_parameters", False)):
                plist = api.get(group) or []
                if not isinstance(plist, list):
                    problem = f"invalid_schema: {group} is not a list"
                    continue
                for p in plist:
                    if not isinstance(p, dict):
                        problem = f"invalid_schema: a parameter in {group} is not an object"
                        continue
                    pname = _str(p.get("name"))
                    names.append(pname)
                    schema = simple_type(p.get("type")) or {"type": "string"}
                    if _str(p.get("description")):
                        schema["description"] = _str(p["description"])
                    default = p.get("default")
                    if default not in (None, "") and _json_safe(default):
                        schema["default"] = default
                    if pname and pname not in props:
                        props[pname] = schema
                        if is_req:
                            required.append(pname)
            full = f"{api_name}_for_{tool_name}" if tool_name else api_name
            yield RawTool(source_name=full, source="toolbench", description=_str(api.get("description")),
                          parameters=object_schema(props, required), where=where, category=category,
                          param_names=names, problem=problem)


def load_xlam(path: Path, records: list[Record]) -> Iterator[Item]:
    """xLAM / APIGen function-calling-60k rows: {query, answers, tools}; `tools` is a JSON string of
    [{name, description, parameters: {p: {type: 'str, optional' | 'List[int]', description, default}}}]."""
    for rec in records:
        row = rec.obj
        tools = row.get("tools") if isinstance(row, dict) else None
        if isinstance(tools, str):
            try:
                tools = _loads(tools)
            except (json.JSONDecodeError, RecursionError) as exc:
                yield LoadIssue(rec.where, "malformed_json", f"'tools' field: {_json_msg(exc)}")
                continue
        if not isinstance(tools, list):
            yield _issue_tool(rec.where, "xLAM row must have a 'tools' list (or a JSON string of one)")
            continue
        for i, fn in enumerate(tools):
            where = f"{rec.where} tools[{i}]"
            if not isinstance(fn, dict):
                yield _issue_tool(where, "tool is not an object")
                continue
            name = _str(fn.get("name"))
            where = f"{where} ({name})"
            params = fn.get("parameters") or {}
            problem = None
            props: dict[str, Any] = {}
            required: list[str] = []
            if isinstance(params, dict) and params.get("type") == "object" and isinstance(params.get("properties"), dict):
                schema = to_schema(params)  # already JSON-Schema-shaped (some xLAM exports)
                props, required = schema.get("properties", {}), schema.get("required", [])
            elif isinstance(params, dict):
                for pname, p in params.items():
                    if not isinstance(p, dict):
                        problem = f"invalid_schema: parameter {pname!r} is not an object"
                        continue
                    schema, optional = py_type_schema(p.get("type"))
                    schema = dict(schema)
                    if _str(p.get("description")):
                        schema["description"] = _str(p["description"])
                    if "default" in p and p["default"] not in (None, "") and _json_safe(p["default"]):
                        schema["default"] = p["default"]
                    props[str(pname)] = schema
                    if not optional and "default" not in p:
                        required.append(str(pname))
            else:
                problem = "invalid_schema: 'parameters' is not an object"
            yield RawTool(source_name=name, source="xlam", description=_str(fn.get("description")),
                          parameters=object_schema(props, required), where=where, problem=problem,
                          param_names=list(props))


def _bfcl_function(fn: Any, where: str) -> Item:
    if not isinstance(fn, dict):
        return _issue_tool(where, "function is not an object")
    name = _str(fn.get("name"))
    where = f"{where} ({name})"
    params = fn.get("parameters")
    problem = None
    schema: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    if isinstance(params, dict):
        try:
            schema = to_schema(params)
        except SchemaDepthError as exc:
            problem = f"too_deep: {exc}"
        schema["type"] = "object"
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
    elif params is not None:
        problem = "invalid_schema: 'parameters' is not an object"
    returns = None
    if isinstance(fn.get("response"), dict):
        returns = to_schema(fn["response"], max_depth=RETURNS_DEPTH, cut=True) or None
    names = list(params.get("properties", {})) if isinstance(params, dict) and isinstance(params.get("properties"), dict) else None
    return RawTool(source_name=name, source="bfcl", description=_str(fn.get("description")), parameters=schema,
                   where=where, returns=returns, problem=problem, param_names=names)


def load_bfcl(path: Path, records: list[Record]) -> Iterator[Item]:
    """BFCL: JSON Lines rows {id, question, function: [functions]} or one function doc per line
    (multi_turn_func_doc, with `response`). Types dict/float/any/tuple/HashMap map to JSON Schema."""
    category = path.stem.replace("BFCL_v4_", "").replace("BFCL_v3_", "") or None
    for rec in records:
        row = rec.obj
        if isinstance(row, dict) and "function" in row:
            fns = row["function"]
            if isinstance(fns, dict):
                fns = [fns]
            if not isinstance(fns, list):
                yield _issue_tool(rec.where, "'function' is not a list")
                continue
            for i, fn in enumerate(fns):
                item = _bfcl_function(fn, f"{rec.where} function[{i}]")
                if isinstance(item, RawTool):
                    item.category = category
                yield item
        elif isinstance(row, dict) and "name" in row and "parameters" in row:
            item = _bfcl_function(row, rec.where)
            if isinstance(item, RawTool):
                item.category = category
            yield item
        else:
            yield _issue_tool(rec.where, "BFCL row has no 'function' list and is not a function doc")


def _openai_items(obj: Any) -> list[Any] | None:
    if isinstance(obj, dict):
        for key in ("tools", "functions"):
            if isinstance(obj.get(key), list):
                return obj[key]
        return [obj]
    return None


def load_openai(path: Path, records: list[Record]) -> Iterator[Item]:
    """OpenAI tool JSON: {"type": "function", "function": {name, description, parameters}}, a bare
    function {name, description, parameters}, lists of those, or {"tools"|"functions": [...]}."""
    for rec in records:
        items = _openai_items(rec.obj)
        if items is None:
            yield _issue_tool(rec.where, "not an OpenAI tool or function object")
            continue
        for i, it in enumerate(items):
            where = rec.where if len(items) == 1 and it is rec.obj else f"{rec.where} tools[{i}]"
            fn = it.get("function") if isinstance(it, dict) and isinstance(it.get("function"), dict) else it
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                yield _issue_tool(where, "OpenAI tool needs a 'function' object with a string 'name'")
                continue
            params = fn.get("parameters", {"type": "object", "properties": {}})
            yield RawTool(source_name=_str(fn["name"]), source="openai", description=_str(fn.get("description")),
                          parameters=params, where=f"{where} ({_str(fn['name'])})",
                          param_names=_prop_names(params))


def _prop_names(params: Any) -> list[str] | None:
    if isinstance(params, dict) and isinstance(params.get("properties"), dict):
        return list(params["properties"])
    return None


def load_mcp(path: Path, records: list[Record]) -> Iterator[Item]:
    """MCP `tools/list` results: {"tools": [{name, description, inputSchema, outputSchema?, annotations?}]},
    optionally inside a JSON-RPC reply {"jsonrpc": "2.0", "result": {...}}. readOnlyHint sets kind."""
    for rec in records:
        obj = rec.obj
        if isinstance(obj, dict) and isinstance(obj.get("result"), dict):
            obj = obj["result"]
        tools = obj.get("tools") if isinstance(obj, dict) else ([obj] if isinstance(obj, dict) else None)
        if isinstance(obj, dict) and tools is None and "inputSchema" in obj:
            tools = [obj]
        if not isinstance(tools, list):
            yield _issue_tool(rec.where, "MCP tools/list result must have a 'tools' list")
            continue
        for i, t in enumerate(tools):
            where = f"{rec.where} tools[{i}]"
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                yield _issue_tool(where, "MCP tool needs a string 'name'")
                continue
            ann = t.get("annotations") if isinstance(t.get("annotations"), dict) else {}
            kind = None
            if ann.get("readOnlyHint") is True:
                kind = "read"
            elif ann.get("readOnlyHint") is False or ann.get("destructiveHint") is True:
                kind = "write"
            out = t.get("outputSchema")
            params = t.get("inputSchema", {"type": "object", "properties": {}})
            yield RawTool(source_name=_str(t["name"]), source="mcp", description=_str(t.get("description")),
                          parameters=params, where=f"{where} ({t['name']})",
                          returns=out if isinstance(out, dict) else None, kind=kind,
                          param_names=_prop_names(params))


def _nestful_params(spec: Any, where: str) -> tuple[dict[str, Any], list[str], str | None]:
    if spec in (None, {}):
        return {}, [], None
    if not isinstance(spec, dict):
        return {}, [], "invalid_schema: 'query_parameters' is not an object"
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, p in spec.items():
        if not isinstance(p, dict):
            return {}, [], f"invalid_schema: parameter {pname!r} is not an object"
        try:
            schema = to_schema(p)
        except SchemaDepthError as exc:
            return {}, [], f"too_deep: {exc}"
        if "type" not in schema and "enum" not in schema and not p.get("type"):
            schema["type"] = "string"  # SGD specs give no types: slot values are strings
        props[str(pname)] = schema
        if p.get("required") is True:
            required.append(str(pname))
    return props, required, None


def load_nestful(path: Path, records: list[Record]) -> Iterator[Item]:
    """NESTFUL `*-spec.json`: [{name, description, query_parameters: {p: {type, description, required,
    default, enum|allowed_values}}, output_parameters: {...}}]; ComplexFuncBench adds huge
    `sample_responses` (ignored) and 39-level output specs (cut to RETURNS_DEPTH)."""
    sub = path.stem.replace("-spec", "")
    for rec in records:
        spec = rec.obj
        if not isinstance(spec, dict):
            yield _issue_tool(rec.where, "NESTFUL spec entry is not an object")
            continue
        name = _str(spec.get("name"))
        where = f"{rec.where} ({name})"
        props, required, problem = _nestful_params(spec.get("query_parameters"), where)
        returns = None
        out = spec.get("output_parameters")
        if isinstance(out, dict) and out:
            returns = to_schema({"type": "object", "properties": out}, max_depth=RETURNS_DEPTH, cut=True)
        category = name.split(".")[0] if "." in name else (_str(spec.get("host")).split(".")[0] or sub)
        yield RawTool(source_name=name, source="nestful", description=_str(spec.get("description")),
                      parameters=object_schema(props, required), where=where, returns=returns,
                      category=category, problem=problem, param_names=list(props))


# tau2: parse tools.py and the domain's data_model.py with ast --------------------------------

_SECTION_RE = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str], str]:
    """Google-style docstring -> (summary, {arg: description}, returns description)."""
    summary: list[str] = []
    args: dict[str, str] = {}
    returns: list[str] = []
    section = None
    current = None
    arg_indent = None
    for line in (doc or "").splitlines():
        m = _SECTION_RE.match(line)
        if m:
            section, current, arg_indent = m.group(1).lower(), None, None
            continue
        if section is None:
            summary.append(line.strip())
        elif section in ("args", "arguments", "parameters"):
            indent = len(line) - len(line.lstrip())
            am = _ARG_RE.match(line)
            if am and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = am.group(1)
                args[current] = am.group(3).strip()
            elif current and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
        elif section in ("returns", "return"):
            if line.strip():
                returns.append(line.strip())
    return " ".join(s for s in summary if s).strip(), args, " ".join(returns).strip()


class _ModelResolver:
    """Resolves type names of a tau2 domain (data_model.py): Literal aliases and pydantic models."""

    def __init__(self, source: str | None):
        self.aliases: dict[str, ast.AST] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        if source:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                tree = None
            for node in (tree.body if tree else []):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.aliases[node.targets[0].id] = node.value
                elif isinstance(node, ast.ClassDef):
                    self.classes[node.name] = node
        self._active: set[str] = set()

    def __call__(self, name: str, depth: int) -> dict[str, Any] | None:
        if name in self._active or depth > 6:
            return {"type": "object"} if name in self.classes else {}
        if name in self.aliases:
            self._active.add(name)
            try:
                return annotation_schema(self.aliases[name], self, depth + 1)
            finally:
                self._active.discard(name)
        if name in self.classes:
            self._active.add(name)
            try:
                return self._class_schema(name, depth)
            finally:
                self._active.discard(name)
        return None

    def _fields(self, name: str, seen: set[str]) -> list[ast.AnnAssign]:
        cls = self.classes.get(name)
        if cls is None or name in seen:
            return []
        seen.add(name)
        fields: list[ast.AnnAssign] = []
        for base in cls.bases:
            if isinstance(base, ast.Name):
                fields.extend(self._fields(base.id, seen))
        fields.extend(n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
        return fields

    def _class_schema(self, name: str, depth: int) -> dict[str, Any]:
        props: dict[str, Any] = {}
        req: dict[str, bool] = {}  # a subclass may redeclare a field: the last declaration wins
        for f in self._fields(name, set()):
            fname = f.target.id  # type: ignore[union-attr]
            schema = dict(annotation_schema(f.annotation, self, depth + 1))
            has_default = f.value is not None
            if isinstance(f.value, ast.Call):
                desc = _field_description(f.value)
                if desc:
                    schema["description"] = desc
                has_default = bool(f.value.args) or any(k.arg in ("default", "default_factory") for k in f.value.keywords)
            props[fname] = schema
            req[fname] = not has_default
        out: dict[str, Any] = {"type": "object", "properties": props}
        required = [f for f, r in req.items() if r]
        if required:
            out["required"] = required
        return out


_KIND = {"READ": "read", "WRITE": "write", "GENERIC": "read", "THINK": "read"}


def _tool_kind(dec: ast.AST) -> str | None | bool:
    """The kind of an @is_tool(ToolType.X) decorator; False when the decorator is not is_tool."""
    if isinstance(dec, ast.Call) and getattr(dec.func, "id", getattr(dec.func, "attr", None)) == "is_tool":
        for a in dec.args:
            if isinstance(a, ast.Attribute):
                return _KIND.get(a.attr)
        return None
    return False


def load_tau2(path: Path, text: str) -> Iterator[Item]:
    """tau2-bench `domains/<d>/tools.py`: every `@is_tool(ToolType.READ|WRITE|GENERIC)` method becomes a
    tool (GENERIC ones, e.g. calculate, change no state: kind=read). Parsed with ast, never imported;
    argument types are resolved through the sibling data_model.py (Literal aliases, pydantic models)."""
    where = str(path)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        yield LoadIssue(where, "malformed_tool", f"not valid Python: {exc}")
        return
    model_path = path.parent / "data_model.py"
    model_text = None
    if model_path.is_file():
        mt, _ = read_text(model_path)
        model_text = mt
    resolve = _ModelResolver(model_text)
    domain = path.parent.name
    category = domain if path.stem == "tools" else f"{domain}_{path.stem.replace('_tools', '')}"
    found = 0
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            kinds = [k for k in (_tool_kind(d) for d in fn.decorator_list) if k is not False]
            if not kinds:
                continue
            found += 1
            summary, arg_docs, ret_doc = parse_docstring(ast.get_docstring(fn) or "")
            args = [a for a in fn.args.args if a.arg != "self"]
            defaults = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
            props: dict[str, Any] = {}
            required: list[str] = []
            for a, d in zip(args, defaults):
                schema = dict(annotation_schema(a.annotation, resolve))
                if arg_docs.get(a.arg):
                    schema["description"] = arg_docs[a.arg]
                if d is not None:
                    if isinstance(d, ast.Constant) and d.value is not None and _json_safe(d.value):
                        schema["default"] = d.value
                else:
                    required.append(a.arg)
                props[a.arg] = schema
            for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
                schema = dict(annotation_schema(a.annotation, resolve))
                if arg_docs.get(a.arg):
                    schema["description"] = arg_docs[a.arg]
                props[a.arg] = schema
                if d is None:
                    required.append(a.arg)
            returns = dict(annotation_schema(fn.returns, resolve)) if fn.returns is not None else {}
            if ret_doc:
                returns["description"] = ret_doc
            yield RawTool(source_name=fn.name, source="tau2", description=summary,
                          parameters=object_schema(props, required), where=f"{where}:{fn.lineno} ({fn.name})",
                          returns=returns or None, category=category, kind=kinds[0],
                          param_names=[a.arg for a in args] + [a.arg for a in fn.args.kwonlyargs])
    if not found:
        yield LoadIssue(where, "unknown_format", "Python file has no @is_tool methods (not a tau2 tools.py)")


# ---------------------------------------------------------------------------------------------
# format detection and the one entry point
# ---------------------------------------------------------------------------------------------

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
