"""Bad tool input, made usable with a documented default and counted by reason.

Synthesis never fails a domain for one odd tool. Each problem gets the default below, and the
tool names are recorded under the reason in DomainSpec.report["bad_input"]:

| reason | default |
|---|---|
| no_description | a sentence made of the name's words ("get weather forecast") |
| no_verb | the tool is a read (a lookup on its entity's table) |
| parameters_not_object | the parameters are wrapped as `{"type": "object", "properties": {...}}` |
| param_not_object | a parameter schema that is not an object becomes `{"type": "string"}` |
| required_not_in_properties | a required name without a property is dropped from `required` |
| enum_type_mismatch | enum values that do not fit the declared type are dropped (the enum too when none fit) |
| invalid_default | a default that does not fit its schema is dropped |
| min_above_max | minimum and maximum (or minLength/maxLength, minItems/maxItems) swapped |

The fixed schemas are what the agent sees (ToolSpec.parameters), so a call the schema allows is
one the environment accepts.
"""

from __future__ import annotations

import copy
from typing import Any

from agentscaler.models import Tool
from agentscaler.naming import name_tokens
from agentscaler.schemas import is_valid

_BOUNDS = (("minimum", "maximum"), ("minLength", "maxLength"), ("minItems", "maxItems"))


def _fix_schema(s: Any, problems: set[str]) -> dict[str, Any]:
    if not isinstance(s, dict):
        problems.add("param_not_object")
        return {"type": "string"}
    s = dict(s)
    t = s.get("type")
    if isinstance(s.get("enum"), list) and isinstance(t, str):
        fit = [v for v in s["enum"] if is_valid(v, {"type": t})]
        if len(fit) != len(s["enum"]):
            problems.add("enum_type_mismatch")
            if fit:
                s["enum"] = fit
            else:
                s.pop("enum")
    for lo, hi in _BOUNDS:
        a, b = s.get(lo), s.get(hi)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and \
                not isinstance(b, bool) and a > b:
            problems.add("min_above_max")
            s[lo], s[hi] = b, a
    if "default" in s and not is_valid(s["default"], {k: v for k, v in s.items() if k != "default"}):
        problems.add("invalid_default")
        s.pop("default")
    if isinstance(s.get("properties"), dict):
        s["properties"] = {k: _fix_schema(v, problems) for k, v in s["properties"].items()}
    if isinstance(s.get("items"), dict):
        s["items"] = _fix_schema(s["items"], problems)
    return s


def inspect_tool(tool: Tool) -> tuple[Tool, list[str]]:
    """(the tool with defaults applied, the reasons found). `no_verb` is decided by the planner."""
    problems: set[str] = set()
    update: dict[str, Any] = {}
    if not (tool.description or "").strip():
        problems.add("no_description")
        update["description"] = " ".join(name_tokens(tool.name)).capitalize() or tool.name
    params = tool.parameters
    if not isinstance(params, dict) or params.get("type") not in (None, "object") or \
            not isinstance(params.get("properties", {}), dict):
        problems.add("parameters_not_object")
        props = params.get("properties") if isinstance(params, dict) and isinstance(params.get("properties"), dict) \
            else {}
        params = {"type": "object", "properties": props, "required": []}
    params = copy.deepcopy(params)
    props = params.get("properties") or {}
    fixed = {k: _fix_schema(v, problems) for k, v in props.items()}
    required = params.get("required") or []
    if not isinstance(required, list):
        required = []
    keep = [r for r in required if r in fixed]
    if len(keep) != len(required):
        problems.add("required_not_in_properties")
    params = {**params, "type": "object", "properties": fixed}
    if keep or "required" in params:
        params["required"] = keep
    if params != tool.parameters:
        update["parameters"] = params
    return (tool.model_copy(update=update) if update else tool), sorted(problems)
