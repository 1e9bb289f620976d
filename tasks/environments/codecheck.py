"""The static check of LLM-written tool code: what it may spell, import, name and reach, decided from
its source and AST (the code is never run here).

A first layer only: whatever passes still runs only in the sandbox worker. The check keeps tool
code to a plain subset of Python in which nothing reaches past the tool's own objects: not the
worker's frames (the nonce that authenticates its replies is a local there), not its modules
(`sys` and `os` are one attribute away from allowed modules: `typing.sys`, `datetime.sys`,
`envs.toolkit.sqlite3`), not the functions the worker or other tools run.

- identifiers are ASCII (Python folds the others, NFKC: `ｇｅｔ_ｕｓｅｒ` *is* `get_user`);
- imports: only ALLOWED modules, and from each only the names it lists (never a module); an
  imported module is only ever named as `module.name` (not passed, stored, rebound); no `*`, no
  relative import;
- names: the module's own definitions, its imports and SAFE_BUILTINS; no dunder names but a read
  of `__name__` (so no eval, exec, compile, open, getattr, setattr, vars, globals, locals, dir,
  __import__, __builtins__, breakpoint, ...); `type()` with one argument only; `globals()` only in
  the module-level alias `globals()["odd-name"] = fn` (tool names that are not identifiers);
- attributes: none private (`_x`, but namedtuple's `_asdict`/`_replace`/`_fields`/`_make`) or
  dunder, none of the frame, code and generator introspection attributes (`gi_frame`, `f_back`,
  `f_globals`, `tb_frame`, ...), not the db helper's `conn`/`spec`; never stored or deleted
  (`json.dumps = ...`, `db.now = ...`, also on a local: it cannot be told from a shared object);
  `match` class patterns read attributes too and follow the same rules;
- `str.format`/`format_map` only on a literal template whose fields read no attribute
  (`'{0.gi_frame.f_back}'.format(g)` reads attributes by names the AST does not show);
- no classes (metaclasses, dunder methods, class attributes), no global/nonlocal.
"""

from __future__ import annotations

import ast
import builtins
import io
import itertools
import math
import string
import tokenize



def _public(module: object) -> frozenset[str]:
    """Every public name of a module of pure functions (math, itertools: no submodules in them)."""
    return frozenset(n for n in dir(module) if not n.startswith("_"))


# module -> the names tool code may use from it (none of them a module, nothing that evaluates text)
ALLOWED: dict[str, frozenset[str]] = {
    "envs.toolkit": frozenset({"ToolError"}),
    "json": frozenset({"dumps", "loads", "JSONDecodeError"}),
    "re": frozenset({"compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer",
                     "escape", "error", "Pattern", "Match", "IGNORECASE", "I", "MULTILINE", "M", "DOTALL", "S",
                     "VERBOSE", "X", "ASCII", "A", "UNICODE", "U", "NOFLAG"}),
    "math": _public(math),
    "itertools": _public(itertools),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone", "tzinfo", "MINYEAR", "MAXYEAR", "UTC"}),
    "decimal": frozenset({"Decimal", "InvalidOperation", "DivisionByZero", "ROUND_CEILING", "ROUND_DOWN", "ROUND_FLOOR",
                          "ROUND_HALF_DOWN", "ROUND_HALF_EVEN", "ROUND_HALF_UP", "ROUND_UP", "ROUND_05UP"}),
    "collections": frozenset({"Counter", "OrderedDict", "defaultdict", "deque", "namedtuple", "ChainMap"}),
    "functools": frozenset({"reduce", "partial", "lru_cache", "cache", "cmp_to_key", "wraps"}),
    "string": frozenset({"ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "hexdigits", "octdigits",
                         "punctuation", "printable", "whitespace", "capwords", "Template"}),
    "statistics": frozenset({"mean", "fmean", "geometric_mean", "harmonic_mean", "median", "median_low", "median_high",
                             "median_grouped", "mode", "multimode", "quantiles", "pstdev", "pvariance", "stdev",
                             "variance", "correlation", "covariance", "linear_regression", "NormalDist",
                             "StatisticsError"}),
    "typing": frozenset({"Any", "Optional", "Union", "List", "Dict", "Tuple", "Set", "FrozenSet", "Iterable", "Iterator",
                         "Sequence", "Mapping", "MutableMapping", "Callable", "Literal", "Generator", "cast"}),
    "__future__": frozenset({"annotations"}),
}
_EXCEPTIONS = frozenset(n for n, v in vars(builtins).items()
                        if isinstance(v, type) and issubclass(v, BaseException) and not n.startswith("_"))
SAFE_BUILTINS = _EXCEPTIONS | {
    "abs", "aiter", "all", "anext", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hasattr",
    "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next",
    "object", "oct", "ord", "pow", "print", "property", "range", "repr", "reversed", "round", "set", "slice",
    "sorted", "staticmethod", "str", "sum", "tuple", "type", "zip", "NotImplemented", "Ellipsis"}
# named in the messages the repair loop shows the model (the rest: "not defined here")
FORBIDDEN_NAMES = frozenset({"exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr", "vars",
                             "locals", "globals", "dir", "input", "breakpoint", "memoryview", "help", "exit", "quit",
                             "super", "__builtins__", "__loader__", "__spec__"})
INTROSPECTION = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended", "cr_frame", "cr_code", "cr_await",
    "cr_origin", "cr_running", "cr_suspended", "ag_frame", "ag_code", "ag_await", "ag_running", "f_back",
    "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "f_trace_lines", "f_trace_opcodes", "f_lasti",
    "f_lineno", "tb_frame", "tb_next", "tb_lasti", "tb_lineno", "co_code", "co_consts", "co_names", "co_varnames",
    "co_filename", "co_freevars", "co_cellvars"})
NAMEDTUPLE = frozenset({"_asdict", "_replace", "_fields", "_make"})
DB_INTERNALS = frozenset({"conn", "spec"})


def non_ascii_names(code: str) -> list[str]:
    """Identifiers spelled with anything but ASCII. The AST cannot show them (the parser folds
    identifiers, NFKC: `ｇｅｔ_ｕｓｅｒ` *is* `get_user`), so the tokens are read."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.NAME and not tok.string.isascii():
                out.append(f"line {tok.start[0]}: identifier {tok.string!r} is not ASCII (Python reads it as another "
                           "name); use ASCII names, and read such a parameter from **params")
    except (tokenize.TokenError, SyntaxError) as exc:
        out.append(f"cannot read the code's names: {exc}")
    return out


def globals_alias_calls(tree: ast.Module) -> set[int]:
    """ids of the `globals` names used only as `globals()["odd-name"] = fn` at module level."""
    ok = set()
    for n in tree.body:
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Subscript)
                and isinstance(n.targets[0].value, ast.Call) and isinstance(n.targets[0].value.func, ast.Name)
                and n.targets[0].value.func.id == "globals" and not n.targets[0].value.args
                and not n.targets[0].value.keywords and isinstance(n.targets[0].slice, ast.Constant)
                and isinstance(n.targets[0].slice.value, str) and not n.targets[0].slice.value.startswith("__")
                and isinstance(n.value, ast.Name)):
            ok.add(id(n.targets[0].value.func))
    return ok


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name the module binds anywhere (assignments, defs, parameters, imports, handlers, patterns)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
    return out


def _attribute_problem(attr: str) -> str | None:
    """Why no object's attribute of this name may be read, or None."""
    if attr.startswith("__"):
        return f"dunder attribute .{attr} is not allowed"
    if attr.startswith("_") and attr not in NAMEDTUPLE:
        return f"private attribute .{attr} is not allowed"
    if attr in INTROSPECTION:
        return f".{attr} is not allowed (frames and code objects reach the worker's own state)"
    if attr in DB_INTERNALS:
        return f".{attr} is not allowed (use the db helper methods)"
    return None


def _template_problem(template: str) -> str | None:
    """Why a str.format template may read attributes (a field like `0.x` or `{0.x}` in a spec)."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"the template is malformed: {exc}"
    for _, field, spec, _ in parts:
        if field is not None and "." in field:
            return f"the field {{{field}}} reads an attribute"
        if spec and "{" in spec and (found := _template_problem(spec)):
            return found
    return None


class _Checker:
    def __init__(self, tree: ast.Module):
        self.problems: list[str] = []
        self.aliases = globals_alias_calls(tree)
        self.defined = _bound_names(tree)
        self.modules: dict[str, str] = {}  # name -> module path it is bound to
        self.parent: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def add(self, node: ast.AST, message: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {message}")

    def module_path(self, node: ast.AST) -> str | None:
        """The module `node` names (a bound module name, or an allowed submodule of one), or None."""
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.module_path(node.value)
            if base is not None and f"{base}.{node.attr}" in ALLOWED:
                return f"{base}.{node.attr}"
        return None

    def run(self, tree: ast.Module) -> list[str]:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name not in ALLOWED:
                        self.add(node, f"import {a.name} is not allowed (allowed: {sorted(ALLOWED)})")
            elif isinstance(node, ast.ImportFrom):
                if node.level or node.module not in ALLOWED:
                    self.add(node, f"from {'.' * node.level}{node.module or ''} import ... is not allowed "
                                   f"(allowed modules: {sorted(ALLOWED)})")
                    continue
                for a in node.names:
                    if a.name not in ALLOWED[node.module]:
                        self.add(node, f"from {node.module} import {a.name} is not allowed "
                                       f"(allowed: {sorted(ALLOWED[node.module])})")
            elif isinstance(node, ast.Name):
                self.name(node)
            elif isinstance(node, ast.Attribute):
                self.attribute(node)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" \
                    and "type" not in self.defined and (len(node.args) != 1 or node.keywords):
                self.add(node, "type() with more than one argument creates classes: not allowed")
            elif isinstance(node, ast.MatchClass):
                for attr in node.kwd_attrs:
                    if (why := _attribute_problem(attr)) is not None:
                        self.add(node, f"a class pattern reads an attribute: {why}")
            elif isinstance(node, ast.ClassDef):
                self.add(node, f"class {node.name}: classes are not allowed in tool code (metaclasses, dunder "
                               "methods and class attributes reach past this check); use functions and dicts")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("__"):
                self.add(node, f"def {node.name}: dunder names are not allowed")
            elif isinstance(node, ast.arg) and node.arg.startswith("__"):
                self.add(node, f"parameter {node.arg}: dunder names are not allowed")
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                self.add(node, "global/nonlocal state is not allowed")
        return self.problems

    def name(self, node: ast.Name) -> None:
        n, parent = node.id, self.parent.get(id(node))
        if n in self.modules:
            if not isinstance(node.ctx, ast.Load):
                self.add(node, f"rebinding the imported module {n} is not allowed")
            elif not (isinstance(parent, ast.Attribute) and parent.value is node):
                self.add(node, f"module {n} may only be used as {n}.<name> (not passed, stored or returned)")
            return
        if not isinstance(node.ctx, ast.Load):
            if n.startswith("__"):
                self.add(node, f"use of {n} is not allowed")
            return
        if n == "__name__" or id(node) in self.aliases:
            return
        if n.startswith("__") or (n in FORBIDDEN_NAMES and n not in self.defined):
            self.add(node, f"use of {n} is not allowed")
        elif n == "type" and n not in self.defined and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add(node, "use of type other than type(x) is not allowed")
        elif n not in self.defined and n not in SAFE_BUILTINS:
            self.add(node, f"name {n} is neither defined in the code nor an allowed builtin")

    def attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.add(node, f"assigning or deleting the attribute .{node.attr} is not allowed (build dicts instead)")
        base = self.module_path(node.value)
        if base is not None:
            path = f"{base}.{node.attr}"
            parent = self.parent.get(id(node))
            if path in ALLOWED:  # a submodule: named only on the way to one of its names
                if not (isinstance(parent, ast.Attribute) and parent.value is node):
                    self.add(node, f"module {path} may only be used as {path}.<name>")
            elif base not in ALLOWED:
                self.add(node, f"{path} is not allowed (allowed modules: {sorted(ALLOWED)})")
            elif node.attr not in ALLOWED[base]:
                self.add(node, f"{path} is not allowed (from {base}: {', '.join(sorted(ALLOWED[base]))})")
            return
        if (why := _attribute_problem(node.attr)) is not None:
            self.add(node, why)
        elif node.attr in ("format", "format_map"):
            v = node.value
            if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
                self.add(node, f".{node.attr} only on a literal template (a template held elsewhere can read "
                               "attributes by name); use an f-string")
            elif (why := _template_problem(v.value)) is not None:
                self.add(node, f"str.{node.attr}: {why}; use an f-string")


def code_problems(tree: ast.Module, code: str) -> list[str]:
    """Every reason the static check refuses this (already parsed) tool code; [] when it passes."""
    return non_ascii_names(code) + _Checker(tree).run(tree)
