"""tau2-bench tool modules: a domain's `tools.py` (and its `data_model.py` for argument types),
parsed with `ast`, never imported."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentscaler import pyast
from tasks.corpus.common import Item, LoadIssue, RawTool, read_text
from tasks.corpus.schema import annotation_schema, field_description, json_safe, object_schema

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
                tree = pyast.parse(source)
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
                desc = field_description(f.value)
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
        tree = pyast.parse(text)
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
                    if isinstance(d, ast.Constant) and d.value is not None and json_safe(d.value):
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
