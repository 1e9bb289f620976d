"""BFCL adapter: single-turn function calling scored by BFCL's AST matcher.

Data: the fetched `bfcl-eval` wheel (`agentscaler.corpora.fetch("bfcl")`):
`bfcl_eval/data/BFCL_v4_<category>.json` (JSON Lines: id, question, function) and
`possible_answer/BFCL_v4_<category>.json` (id, ground_truth: [{func: {param: [allowed values]}}]).

The matcher is a port of the Python path of BFCL's `eval_checker/ast_eval/ast_checker.py`
(Apache-2.0, Gorilla/BFCL authors), for models called through native function calling:
- function names: tools are shown with "." replaced by "_" (OpenAI names allow no dots), and the
  expected name is converted the same way (BFCL's `underscore_to_dot` models);
- every required parameter present; no parameter outside the schema or the possible answer;
- type check per BFCL type, int accepted where float is expected; nested list item types;
- each value in the possible-answer list, strings normalized as BFCL does (drop spaces and
  `,./-_*^`, lowercase, ' -> "), lists and dicts element-wise; "" in a list = optional;
- `parallel*` categories order-insensitive; `multiple` checks the one expected call;
- irrelevance categories pass when the model makes no call, live_relevance when it makes one.
Java and JavaScript categories (string-typed arguments converted by BFCL's converters) are not
supported.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler.corpora import fetch
from agentscaler.llm import LLMClient, LLMError, LLMFormatError
from agentscaler.workspace import Workspace, atomic_write_json

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple",
              "live_parallel", "live_parallel_multiple", "irrelevance", "live_irrelevance", "live_relevance")
ALIASES = {"simple": "simple_python"}
NO_CALL_CATEGORIES = ("irrelevance", "live_irrelevance")

PYTHON_TYPE_MAPPING: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool,
                                        "array": list, "tuple": list, "dict": dict, "any": str}
NESTED_TYPES = ("array", "tuple")
JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string", "integer": "integer",
                     "string": "string", "boolean": "boolean", "array": "array", "object": "object",
                     "number": "number", "null": "null"}


class BFCLDataError(ValueError):
    """A BFCL data file or row is missing or malformed (names the file and row)."""


# ------------------------------------------------------------------------------------ data
def data_root(root: Path | None = None) -> Path:
    """The `bfcl_eval/data` folder of the extracted wheel (fetched on first use)."""
    if root is not None:
        return Path(root)
    base = Path(fetch("bfcl"))
    for cand in (base / "bfcl_eval" / "data", base / "data", base):
        if (cand / "possible_answer").is_dir():
            return cand
    raise BFCLDataError(f"no bfcl_eval/data/possible_answer under {base}")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise BFCLDataError(f"{path}:{n}: invalid JSON ({exc})") from exc
    return rows


def load_category(category: str, root: Path | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Items {"id", "category", "messages" (first turn), "functions", "ground_truth"} of one category."""
    category = ALIASES.get(category, category)
    if category not in CATEGORIES:
        raise ValueError(f"unsupported BFCL category {category!r} (supported: {', '.join(CATEGORIES)})")
    base = data_root(root)
    qpath = base / f"BFCL_v4_{category}.json"
    if not qpath.is_file():
        raise BFCLDataError(f"missing {qpath}")
    answers: dict[str, Any] = {}
    apath = base / "possible_answer" / f"BFCL_v4_{category}.json"
    if category not in NO_CALL_CATEGORIES and category != "live_relevance":
        if not apath.is_file():
            raise BFCLDataError(f"missing {apath}")
        answers = {r["id"]: r.get("ground_truth") for r in _jsonl(apath)}
    items = []
    for row in _jsonl(qpath):
        rid = row.get("id")
        q = row.get("question")
        if not isinstance(q, list) or not q or not isinstance(q[0], list):
            raise BFCLDataError(f"{qpath}: row {rid}: 'question' is not a list of turns")
        if answers and rid not in answers:
            raise BFCLDataError(f"{apath}: no possible answer for {rid}")
        items.append({"id": rid, "category": category, "messages": q[0], "functions": row.get("function") or [],
                      "ground_truth": answers.get(rid)})
        if limit and len(items) >= limit:
            break
    return items


# ------------------------------------------------------------------------ tools shown to model
def tool_name(name: str) -> str:
    """BFCL name -> OpenAI-safe name ("math.factorial" -> "math_factorial")."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64]


def _schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _schema(v) for k, v in node.items() if k != "type"}
        if "type" in node:
            t = node["type"]
            out["type"] = JSON_SCHEMA_TYPES.get(t, "string") if isinstance(t, str) else t
        if isinstance(node.get("properties"), dict):
            out["properties"] = {k: _schema(v) for k, v in node["properties"].items()}
        return out
    if isinstance(node, list):
        return [_schema(v) for v in node]
    return node


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs as OpenAI tool schemas (BFCL types mapped to JSON Schema)."""
    tools = []
    for fn in functions:
        params = _schema(fn.get("parameters") or {"type": "dict", "properties": {}})
        params["type"] = "object"
        tools.append({"type": "function", "function": {"name": tool_name(fn["name"]),
                                                       "description": fn.get("description", ""),
                                                       "parameters": params}})
    return tools


# ---------------------------------------------------------------------------------- matcher
def _fail(error: str, error_type: str) -> dict[str, Any]:
    return {"valid": False, "error": [error], "error_type": error_type}


OK: dict[str, Any] = {"valid": True, "error": []}


def standardize_string(s: str) -> str:
    """BFCL's normalization: drop spaces and ,./-_*^ , lowercase, single -> double quotes."""
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", s).lower().replace("'", '"')


def _answer_type(possible: list) -> type | None:
    for a in possible:
        if a != "":
            return type(a)
    return None


def type_checker(param: str, value: Any, possible: list, expected_desc: str, expected: type,
                 nested: type | None) -> dict[str, Any]:
    """BFCL's type check; `is_variable` when the possible answer's type differs from the schema type."""
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type != expected
    if type(value) == expected:  # noqa: E721  (exact type: bool is not int here, as in BFCL)
        if nested is None:
            return {"valid": True, "error": [], "is_variable": is_variable}
        for item in possible:
            flag = True
            if type(item) == list:  # noqa: E721
                for v in value:
                    if not type_checker(param, v, item, str(nested), nested, None)["valid"]:
                        flag = False
                        break
            if flag:
                return {"valid": True, "error": [], "is_variable": is_variable}
        return _fail(f"Nested type checking failed for parameter {param!r}. Expected outer type {expected_desc} "
                     f"with inner type {nested}. Parameter value: {value!r}.", "type_error:nested")
    if answer_type is not None and type(value) == answer_type:  # noqa: E721
        return {"valid": True, "error": [], "is_variable": True}
    return _fail(f"Incorrect type for parameter {param!r}. Expected type {expected_desc}, got "
                 f"{type(value).__name__}. Parameter value: {value!r}.", "type_error:simple")


def string_checker(param: str, value: str, possible: list) -> dict[str, Any]:
    if standardize_string(value) not in [standardize_string(p) for p in possible if type(p) == str]:  # noqa: E721
        return _fail(f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible}. "
                     "Case insensitive.", "value_error:string")
    return OK


def _std(v: Any) -> Any:
    return standardize_string(v) if type(v) == str else v  # noqa: E721


def list_checker(param: str, value: list, possible: list) -> dict[str, Any]:
    out = [_std(v) for v in value]
    options = [[_std(v) for v in p] for p in possible if isinstance(p, list)]
    if out not in options:
        return _fail(f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible}.",
                     "value_error:list/tuple")
    return OK


def dict_checker(param: str, value: dict, possible_answers: list) -> dict[str, Any]:
    result = _fail("no possible dict answer", "dict_checker:unclear")
    for possible in possible_answers:
        if possible == "":
            continue
        flag = True
        for key, v in value.items():
            if key not in possible:
                result = _fail(f"Unexpected dict key parameter: {key!r}.", "value_error:dict_key")
                flag = False
                break
            if _std(v) not in [_std(p) for p in possible[key]]:
                result = _fail(f"Invalid value for parameter {key!r}: {v!r}. Expected one of {possible[key]}.",
                               "value_error:dict_value")
                flag = False
                break
        if flag:
            for key, allowed in possible.items():
                if key not in value and "" not in allowed:
                    result = _fail(f"Missing dict key parameter: {key!r}.", "value_error:dict_key")
                    flag = False
                    break
        if flag:
            return OK
    return result


def list_dict_checker(param: str, value: list, possible_answers: list) -> dict[str, Any]:
    result = _fail("no possible list of dicts", "list_dict_checker:unclear")
    for possible in possible_answers:
        if not isinstance(possible, list) or len(value) != len(possible):
            result = _fail("Wrong number of dictionaries in the list.", "value_error:list_dict_count")
            continue
        flag = True
        for i, item in enumerate(value):
            result = dict_checker(param, item, [possible[i]])
            if not result["valid"]:
                flag = False
                break
        if flag:
            return OK
    return result


def simple_function_checker(func: dict[str, Any], model_call: dict[str, Any],
                            possible_answer: dict[str, Any]) -> dict[str, Any]:
    """One expected call vs one model call {name: {param: value}} (BFCL's simple checker, Python)."""
    possible = list(possible_answer.values())[0]
    name = tool_name(func["name"])
    props = (func.get("parameters") or {}).get("properties") or {}
    required = (func.get("parameters") or {}).get("required") or []
    if not isinstance(model_call, dict) or name not in model_call:
        return _fail(f"Function name {name!r} not found in model output.", "simple_function_checker:wrong_func_name")
    params = model_call[name]
    if not isinstance(params, dict):
        return _fail(f"Arguments of {name!r} are not an object.", "simple_function_checker:bad_arguments")
    for p in required:
        if p not in params:
            return _fail(f"Missing required parameter: {p!r}.", "simple_function_checker:missing_required")
    for p, value in params.items():
        if p not in props or p not in possible:
            return _fail(f"Unexpected parameter: {p!r}.", "simple_function_checker:unexpected_param")
        desc = props[p].get("type")
        if desc not in PYTHON_TYPE_MAPPING:
            return _fail(f"Unsupported BFCL type {desc!r} for parameter {p!r}.", "type_error:unsupported")
        expected = PYTHON_TYPE_MAPPING[desc]
        nested = None
        if desc in NESTED_TYPES:
            nested = PYTHON_TYPE_MAPPING.get(((props[p].get("items") or {}).get("type")) or "", None)
        if desc == "float" and type(value) == int:  # noqa: E721  (int accepted for float)
            value = float(value)
        tc = type_checker(p, value, possible[p], desc, expected, nested)
        if not tc["valid"]:
            return tc
        if not tc["is_variable"]:
            if expected == dict:
                r = dict_checker(p, value, possible[p])
            elif expected == list and nested == dict:
                r = list_dict_checker(p, value, possible[p])
            elif expected == str:
                r = string_checker(p, value, possible[p])
            elif expected == list:
                r = list_checker(p, value, possible[p])
            else:
                r = None
            if r is not None:
                if not r["valid"]:
                    return r
                continue
        if value not in possible[p]:
            return _fail(f"Invalid value for parameter {p!r}: {value!r}. Expected one of {possible[p]}.",
                         "value_error:others")
    for p, allowed in possible.items():
        if p not in params and "" not in allowed:
            return _fail(f"Optional parameter {p!r} not provided and not marked as optional.",
                         "simple_function_checker:missing_optional")
    return {"valid": True, "error": []}


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((f for f in functions if f["name"] == name), None)


def ast_check(functions: list[dict[str, Any]], model_output: list[dict[str, Any]], possible_answer: list | None,
              category: str) -> dict[str, Any]:
    """Score one item: model_output = [{name: {param: value}}] in call order."""
    category = ALIASES.get(category, category)
    if category in NO_CALL_CATEGORIES:
        return OK if not model_output else _fail("Function called on an irrelevant request.",
                                                 "irrelevance:called")
    if category == "live_relevance":
        return OK if model_output else _fail("No function called on a relevant request.", "relevance:no_call")
    possible_answer = possible_answer or []
    if "parallel" in category:
        if len(model_output) != len(possible_answer):
            return _fail("Wrong number of functions.", "parallel_function_checker_no_order:wrong_count")
        matched: list[int] = []
        for i, expected in enumerate(possible_answer):
            func = _find(functions, list(expected)[0])
            if func is None:
                return _fail(f"Possible answer names unknown function {list(expected)[0]!r}.", "data_error")
            for idx, call in enumerate(model_output):
                if idx in matched:
                    continue
                if simple_function_checker(func, call, expected)["valid"]:
                    matched.append(idx)
                    break
            else:
                return _fail(f"Could not find a matching function for index {i} of possible answers.",
                             "parallel_function_checker_no_order:cannot_find_match")
        return OK
    if len(model_output) != len(possible_answer) or len(model_output) != 1:
        kind = "multiple" if "multiple" in category else "simple"
        return _fail("Wrong number of functions.", f"{kind}_function_checker:wrong_count")
    func = _find(functions, list(possible_answer[0])[0]) if "multiple" in category else functions[0]
    if func is None:
        return _fail(f"Possible answer names unknown function {list(possible_answer[0])[0]!r}.", "data_error")
    return simple_function_checker(func, model_output[0], possible_answer[0])


# ------------------------------------------------------------------------------------ running
def model_output(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ChatReply.tool_calls ([{"id","name","arguments"}]) -> BFCL's [{name: arguments}]."""
    return [{c["name"]: c.get("arguments") or {}} for c in tool_calls]


def score_items(items: list[dict[str, Any]], outputs: dict[str, list[dict[str, Any]] | None]) -> dict[str, Any]:
    """Accuracy of outputs ({item id: model output, or None when the model's reply was malformed})."""
    results = []
    for it in items:
        out = outputs.get(it["id"])
        if out is None:
            r = _fail("Model reply could not be parsed as function calls.", "format_error")
        else:
            r = ast_check(it["functions"], out, it["ground_truth"], it["category"])
        results.append({"id": it["id"], "valid": r["valid"], "error_type": r.get("error_type"),
                        "error": r["error"][:2], "output": out})
    n = len(results)
    correct = sum(r["valid"] for r in results)
    return {"items": n, "correct": correct, "accuracy": correct / n if n else 0.0,
            "errors": dict(Counter(r["error_type"] for r in results if not r["valid"])), "results": results}


async def _ask_all(client: Any, items: list[dict[str, Any]], max_tokens: int, tool_choice: str | None) -> dict[str, Any]:
    async def one(it: dict[str, Any]) -> tuple[str, Any]:
        try:
            reply = await client.chat(it["messages"], tools=openai_tools(it["functions"]), temperature=0.0,
                                      max_tokens=max_tokens, stage="bfcl", tool_choice=tool_choice)
        except LLMFormatError:
            return it["id"], None
        except LLMError as exc:
            return it["id"], {"transport_error": str(exc)[:300]}
        return it["id"], model_output(reply.tool_calls)

    return dict(await asyncio.gather(*(one(it) for it in items)))


async def run_bfcl_async(client: Any, category: str, limit: int | None = None, root: Path | None = None,
                         max_tokens: int = 256, tool_choice: str | None = None) -> dict[str, Any]:
    """Ask the model every item of a category (one turn, native tool calling) and score it.

    tool_choice "required" forces a call (a grammar on the local server): BFCL itself leaves the
    choice to the model ("auto", None here); forcing helps read a tiny model's argument skills.
    """
    items = load_category(category, root=root, limit=limit)
    t0 = time.perf_counter()
    answers = await _ask_all(client, items, max_tokens, tool_choice)
    transport = {k: v["transport_error"] for k, v in answers.items() if isinstance(v, dict)}
    outputs = {k: v for k, v in answers.items() if not isinstance(v, dict)}
    scored = score_items([it for it in items if it["id"] not in transport], outputs)
    scored.update({"category": ALIASES.get(category, category), "model": getattr(client, "model", ""),
                   "tool_choice": tool_choice or "auto", "transport_errors": transport,
                   "wall_s": round(time.perf_counter() - t0, 2)})
    return scored


def run_bfcl(client: Any, category: str, limit: int | None = None, root: Path | None = None,
             max_tokens: int = 256, tool_choice: str | None = None) -> dict[str, Any]:
    """run_bfcl_async for synchronous callers."""
    return asyncio.run(run_bfcl_async(client, category, limit, root, max_tokens, tool_choice))


def bfcl_eval(ws: Workspace, base_url: str | list[str], category: str, model: str = "smollm2-135m",
              limit: int | None = None, tool_choice: str = "auto") -> tuple[dict[str, Any], Path]:
    """Score a model on a BFCL category and write reports/bfcl-<category>-<model>-<tool choice>.json.

    tool_choice: "auto" (BFCL's setting) or "required". Returns (report, its path). Raises
    ValueError for an unknown category."""

    async def go() -> dict[str, Any]:
        async with LLMClient(base_url, model=model, timeout=120, cache_path=ws.cache_dir / "llm.sqlite") as client:
            return await run_bfcl_async(client, category, limit=limit,
                                        tool_choice=None if tool_choice == "auto" else tool_choice)

    rep = asyncio.run(go())
    path = ws.reports_dir / f"bfcl-{rep['category']}-{model.replace('/', '_')}-{tool_choice}.json"
    atomic_write_json(path, rep)
    return rep, path
