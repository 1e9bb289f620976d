"""Corpus type notations -> Draft 2020-12 JSON Schema: type names as corpora spell them (BFCL's
dict/float/any, STRING, HashMap), JSON-Schema-like property specs, and Python annotations
(xLAM type strings, tau2 signatures)."""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from typing import Any

from agentscaler import pyast
from tasks.corpus.common import MAX_DEPTH

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


def json_safe(v: Any, depth: int = 0) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, _JSON_SAFE):
        return True
    if depth > 8:
        return False
    if isinstance(v, list):
        return all(json_safe(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and json_safe(x, depth + 1) for k, x in v.items())
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
    if isinstance(enum, list) and enum and all(json_safe(x) for x in enum):
        seen: list[Any] = []
        for x in enum:
            if x not in seen:
                seen.append(x)
        out["enum"] = seen
    default = node.get("default", node.get("default_value"))  # NESTFUL/SGD say default_value
    if default is not None and json_safe(default):
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
                return annotation_schema(pyast.parse(node.value, mode="eval").body, resolve, depth + 1)
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
            vals = [a.value for a in args if isinstance(a, ast.Constant) and json_safe(a.value)]
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
                desc = field_description(a)
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


def field_description(node: ast.AST) -> str | None:
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
        node = pyast.parse(t, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return simple_type(t) or {}, optional
    if isinstance(node, ast.Subscript):
        base = node.value.id if isinstance(node.value, ast.Name) else ""
        if base.lower() == "optional":
            optional = True
    return annotation_schema(node, None), optional
