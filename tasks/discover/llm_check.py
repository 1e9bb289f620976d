"""LLM dependency check of a domain (issue 3 item 4; the paper's "an LLM then checks the
dependencies inside each domain").

Per domain the model sees the member tools and the candidate edges (with the rule-based check's
reason) and answers, in strict JSON, which edges are real dependencies and which tools do not
belong. The decision and the model's reason are recorded per edge and per dropped tool
(`"by": "llm"`). A reply that is not the requested JSON, or that names unknown edges or tools,
is a format error: the domain keeps the rule-based decisions (tasks.discover.domains.dependency_check)
and the error and raw reply are recorded (`"by": "rules"`, fallback_reason).

`LLMDependencyChecker` plugs into `tasks.discover.domains.find_domains(..., checker=...)` /
`discover(..., checker=...)`; `llm_dependency_check` is the plain async function on names.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentscaler.llm import LLMClient, LLMError, LLMFormatError, parse_json_reply
from agentscaler.models import Tool
from tasks.discover import llm_check_prompt as P

STAGE = "dependency_check"
MAX_EDGES = 80  # edges shown to the model per domain; the rest keep the rule-based decision

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["edges", "drop"],
    "properties": {
        "edges": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["index", "real", "reason"],
            "properties": {"index": {"type": "integer", "minimum": 0}, "real": {"type": "boolean"},
                           "reason": {"type": "string"}}}},
        "drop": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "reason"],
            "properties": {"name": {"type": "string"}, "reason": {"type": "string"}}}}}}


def _tool_line(t: Tool) -> str:
    props = (t.parameters or {}).get("properties") or {}
    return f"- {t.name}: {(t.description or '').strip()[:200]}; parameters: {', '.join(list(props)[:12]) or '-'}"


def build_messages(tools: list[Tool], edges: list[dict[str, Any]]) -> list[dict[str, str]]:
    edge_lines = [f"{i}. {e['src']} -> {e['dst']} [{e.get('kind', 'dataflow')}]: {e.get('reason', '-')}"
                  for i, e in enumerate(edges)]
    user = P.USER.format(tools="\n".join(_tool_line(t) for t in tools), edges="\n".join(edge_lines) or "(none)")
    return [{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": user}]


def parse_decision(text: str | None, n_edges: int, names: set[str]) -> dict[str, Any]:
    """Strict: valid JSON of REPLY_SCHEMA, every edge index exactly once, only known tool names,
    and not every tool dropped. Raises LLMFormatError (raw text kept) otherwise."""
    value = parse_json_reply(text, REPLY_SCHEMA)
    idx = [e["index"] for e in value["edges"]]
    if sorted(idx) != list(range(n_edges)):
        missing = sorted(set(range(n_edges)) - set(idx))
        extra = sorted(i for i in set(idx) if i >= n_edges)
        dup = sorted({i for i in idx if idx.count(i) > 1})
        raise LLMFormatError(f"edge decisions must cover indices 0..{n_edges - 1} once "
                             f"(missing {missing[:10]}, unknown {extra[:10]}, repeated {dup[:10]})", text)
    unknown = [d["name"] for d in value["drop"] if d["name"] not in names]
    if unknown:
        raise LLMFormatError(f"drop names unknown tools {unknown[:10]}", text)
    if names and {d["name"] for d in value["drop"]} >= names:
        raise LLMFormatError("the reply drops every tool of the domain", text)
    return value


async def llm_dependency_check(client: LLMClient, tools: list[Tool], decisions: list[dict[str, Any]],
                               max_tokens: int = 1024, json_schema: bool = True) -> dict[str, Any]:
    """Check one domain. `decisions`: the rule-based edge decisions ({src, dst, kind, confirmed,
    reason}). Returns {"by": "llm"|"rules", "decisions": [...same order, updated...],
    "drop": [{name, reason}], "usage": {...}, "fallback_reason"?, "raw"?}."""
    shown = decisions[:MAX_EDGES]
    names = {t.name for t in tools}
    kwargs: dict[str, Any] = {"response_format": {"type": "json_object", "schema": REPLY_SCHEMA}} if json_schema else {}
    raw: str | None = None
    usage: dict[str, int] = {}
    try:
        reply = await client.chat(build_messages(tools, shown), max_tokens=max_tokens, stage=STAGE, **kwargs)
        raw = reply.content
        usage = dict(reply.usage)
        if reply.finish_reason == "length":
            raise LLMFormatError(f"reply cut at max_tokens={max_tokens}", raw)
        value = parse_decision(raw, len(shown), names)
    except LLMError as exc:
        if exc.transient:
            raise
        return {"by": "rules", "decisions": [dict(d, by="rules") for d in decisions], "drop": None,
                "fallback_reason": f"{type(exc).__name__}: {exc}"[:500],
                "raw": (getattr(exc, "raw", None) or raw or "")[:2000], "usage": usage}
    out = [dict(d, by="rules") for d in decisions]
    for e in value["edges"]:
        d = out[e["index"]]
        d.update({"confirmed": bool(e["real"]), "by": "llm", "reason": e["reason"][:300],
                  "rule_confirmed": decisions[e["index"]]["confirmed"]})
    drop = [{"name": d["name"], "reason": d["reason"][:300], "by": "llm"} for d in value["drop"]]
    return {"by": "llm", "decisions": out, "drop": drop, "usage": usage}


class LLMDependencyChecker:
    """`checker` for tasks.discover.domains.find_domains: replaces the rule-based decisions of each domain
    with the model's, falling back to the rule-based ones on a format error. Keeps counts in
    `.stats` and every domain's outcome in `.log`."""

    def __init__(self, client: LLMClient, max_tokens: int = 1024, json_schema: bool = True):
        self.client, self.max_tokens, self.json_schema = client, max_tokens, json_schema
        self.stats = {"domains": 0, "by_llm": 0, "fallbacks": 0, "edges_flipped": 0, "dropped": 0,
                      "prompt_tokens": 0, "completion_tokens": 0}
        self.log: list[dict[str, Any]] = []

    def __call__(self, members, tools: list[Tool], decisions: list[dict], kept: list[int],
                 dropped: list[dict]) -> tuple[list[int], list[dict], list[dict]]:
        members = [int(m) for m in members]
        member_tools = [tools[m] for m in members]
        res = asyncio.run(llm_dependency_check(self.client, member_tools, decisions, self.max_tokens,
                                               self.json_schema))
        self.stats["domains"] += 1
        self.stats["prompt_tokens"] += res["usage"].get("prompt_tokens", 0)
        self.stats["completion_tokens"] += res["usage"].get("completion_tokens", 0)
        entry = {"names": [t.name for t in member_tools][:40], "by": res["by"]}
        if res["by"] != "llm":
            self.stats["fallbacks"] += 1
            entry.update({"fallback_reason": res["fallback_reason"], "raw": res["raw"][:500]})
            self.log.append(entry)
            return kept, [dict(d, fallback_reason=res["fallback_reason"]) for d in res["decisions"]], dropped
        self.stats["by_llm"] += 1
        self.stats["edges_flipped"] += sum(d.get("rule_confirmed", d["confirmed"]) != d["confirmed"]
                                           for d in res["decisions"])
        drop_names = {d["name"]: d["reason"] for d in res["drop"]}
        new_kept = [m for m in members if tools[m].name not in drop_names]
        new_dropped = [{"name": tools[m].name, "tool": tools[m].id, "reason": drop_names[tools[m].name], "by": "llm"}
                       for m in members if tools[m].name in drop_names]
        self.stats["dropped"] += len(new_dropped)
        entry["dropped"] = [d["name"] for d in new_dropped]
        self.log.append(entry)
        return new_kept, res["decisions"], new_dropped


def summary(checker: LLMDependencyChecker) -> str:
    return json.dumps(checker.stats, sort_keys=True)
