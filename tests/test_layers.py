"""The import direction of the layers (docs/ARCHITECTURE.md, docs/CONTRIBUTING.md), read from the code with `ast`.

    core (agentscaler/)  <-  envs/  <-  stages (tasks/<stage>/)  <-  flows/  <-  the CLI (flows/cli.py)
                         <-  training/ (the trainer program, run in its own process)

Every import of our own packages is counted, at module top or inside a function (none should be
inside one: the graph must be visible), so nothing can hide an upward import.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentscaler", "envs", "tasks", "flows", "training")
CLI = "flows.cli"


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


TREES = {path: ast.parse(path.read_text(encoding="utf-8"))
         for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))}


def _imports() -> dict[str, list[tuple[str, int, bool]]]:
    """module -> [(imported module, line, inside a function)] for imports of our packages and of prefect."""
    out: dict[str, list[tuple[str, int, bool]]] = {}
    for path, tree in TREES.items():
        inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from pkg import sub` may name a submodule: count both readings
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in PACKAGES + ("prefect",):
                    found.append((name, node.lineno, id(node) in inner))
        out[_module(path)] = found
    return out


IMPORTS = _imports()
MODULES = set(IMPORTS)


def _ours(name: str) -> str | None:
    """The module of ours an imported name refers to (the longest known prefix), or None."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULES:
            return ".".join(parts[:i])
    return None


def _layer(module: str) -> str:
    if module == CLI:
        return "cli"
    return module.split(".")[0].replace("agentscaler", "core").replace("tasks", "stages")


ALLOWED = {  # layer -> the layers it may import
    "core": {"core"},
    "envs": {"core", "envs"},
    "training": {"core", "training"},
    "stages": {"core", "envs", "training", "stages"},
    "flows": {"core", "envs", "training", "stages", "flows"},
    "cli": {"core", "stages", "flows"},
}


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, found in IMPORTS.items():
        for name, _, _ in found:
            target = _ours(name)
            if target and target != mod and not mod.startswith(target + "."):  # a package's own __init__
                graph[mod].add(target)
    return graph


def test_layers_point_one_way():
    wrong = [f"{mod} ({_layer(mod)}) imports {target} ({_layer(target)})"
             for mod, targets in _edges().items() for target in targets
             if _layer(target) not in ALLOWED[_layer(mod)]]
    assert not wrong, "\n".join(sorted(wrong))


def test_prefect_only_in_flows_and_the_cli():
    wrong = [f"{mod}:{line}" for mod, found in IMPORTS.items() for name, line, _ in found
             if name.split(".")[0] == "prefect" and not (mod.startswith("flows") or mod == CLI)]
    assert not wrong, wrong


def test_our_imports_sit_at_module_top():
    """Lazy imports are for heavy optional packages; the CLI imports the flows lazily (Prefect's import
    costs seconds, the stage commands never need it), and the MCP server (the MCP library is a third
    of every command's imports; only `serve` needs it)."""
    wrong = [f"{mod}:{line} imports {name} inside a function" for mod, found in IMPORTS.items()
             for name, line, inner in found
             if inner and _ours(name) and not (mod == CLI and (_layer(_ours(name) or "") == "flows"
                                                                or name.startswith("tasks.serve.mcp_server")))]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_stage_packages_form_no_cycle():
    """tasks/<stage> packages depend on each other in one direction only (a stage borrows from another,
    never both ways)."""
    pkg = defaultdict(set)
    for mod, targets in _edges().items():
        for target in targets:
            a, b = mod.split(".")[:2], target.split(".")[:2]
            if a[0] == b[0] == "tasks" and len(a) > 1 and len(b) > 1 and a[1] != b[1]:
                pkg[a[1]].add(b[1])
    both = sorted({tuple(sorted((a, b))) for a, bs in pkg.items() for b in bs if a in pkg.get(b, ())})
    assert not both, both


def test_python_is_parsed_one_thread_at_a_time():
    """Issue 23: every parse of Python source into `ast` objects goes through agentscaler.pyast's
    lock (CPython 3.11's conversion is not thread-safe), never `ast.parse`, `ast.literal_eval` or
    `compile(..., ast.PyCF_ONLY_AST)` directly. (Library code calling `ast.parse` is covered by
    pyast.install; tests/agentscaler/test_pyast.py provokes the race.)"""
    wrong = []
    for path, tree in TREES.items():
        if path == ROOT / "agentscaler" / "pyast.py":
            continue
        for node in ast.walk(tree):
            attr = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if attr in ("parse", "literal_eval", "PyCF_ONLY_AST") and (
                    attr != "parse" or (isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "ast")):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {attr}")
    assert not wrong, wrong
    assert any(isinstance(n, ast.Attribute) and n.attr == "parse" and getattr(n.value, "id", "") == "pyast"
               for tree in TREES.values() for n in ast.walk(tree))  # the check sees the real calls


def test_the_checks_see_the_code():
    """The checks above read real imports (an empty graph would pass them all)."""
    graph = _edges()
    assert "tasks.scenarios.build" in graph["flows.build_worker"]
    assert "agentscaler.workspace" in graph["tasks.corpus.ingest"]
    assert any(name.startswith("prefect") for name, _, _ in IMPORTS["flows.common"])
