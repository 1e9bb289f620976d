"""Loaders of the JSON corpus formats, one function each: toolbench, xlam, bfcl, openai, mcp, nestful.

toolbench: RapidAPI tool JSON with `api_list`; xlam: APIGen function-calling rows whose `tools` is
a JSON string with Python-style types; bfcl: JSON Lines rows with `function`, or one function
doc per line; openai: tool/function JSON; mcp: `tools/list` results; nestful: `*-spec.json` lists.
Each takes the file's parsed records and yields RawTool or LoadIssue (tasks.corpus.common).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.corpus.common import RETURNS_DEPTH, Item, LoadIssue, RawTool, Record, json_error_message, loads
from tasks.corpus.schema import SchemaDepthError, json_safe, object_schema, py_type_schema, simple_type, to_schema


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
                    if default not in (None, "") and json_safe(default):
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
                tools = loads(tools)
            except (json.JSONDecodeError, RecursionError) as exc:
                yield LoadIssue(rec.where, "malformed_json", f"'tools' field: {json_error_message(exc)}")
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
                    if "default" in p and p["default"] not in (None, "") and json_safe(p["default"]):
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
