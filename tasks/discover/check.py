"""The dependency check of a domain: which of its edges are real dependencies, which tools do not belong.

Rules first (always): an edge is confirmed when it is dataflow (an output key feeds a required
input), or similar with a shared parameter/output key, or strongly similar; a tool with no
confirmed edge that sits far from the rest of its domain is dropped.

Then, optionally, an LLM (the paper's "an LLM then checks the dependencies inside each domain";
`agentscaler discover --llm-check`): per domain the model sees the member tools and the
candidate edges (with the rules' reason) and answers, in strict JSON, which edges are real and
which tools do not belong. Its decision and reason are recorded per edge and per dropped tool
(`"by": "llm"`). A reply that is not the requested JSON, or that names unknown edges or tools, is
a format error: the domain keeps the rules' decisions, with the error and raw reply recorded
(`"by": "rules"`, fallback_reason). `LLMDependencyChecker` counts what the check cost.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from agentscaler.llm import LLMClient, LLMError, LLMFormatError, parse_json_reply
from agentscaler.models import Tool
from agentscaler.naming import snake
from tasks.discover import check_prompt as P
from tasks.discover.config import DiscoverConfig
from tasks.discover.graph import GENERIC_KEYS, input_keys, output_keys, unit

# --- rules ----------------------------------------------------------------------------------------

def dependency_check(members: np.ndarray, tools: list[Tool], vecs: np.ndarray, edges: list[tuple[int, int, str, float, str]],
                     cfg: DiscoverConfig) -> tuple[list[int], list[dict], list[dict]]:
    """Rule-based check of one domain. Returns (kept members, edge decisions, dropped tools with reasons).

    An edge is a confirmed dependency when it is dataflow (an output key feeds a required input),
    or similar with a shared parameter/output key, or similar with cosine >= threshold + 0.1.
    A tool with no confirmed edge is dropped when its cosine to the rest of the domain is below
    drop_min_sim (it landed here by proximity, not by dependency).
    """
    keys = {int(i): input_keys(tools[i]) | output_keys(tools[i]) | _param_keys(tools[i]) for i in members}
    decisions, confirmed_nodes = [], set()
    for a, b, kind, w, key in edges:
        if kind == "dataflow":
            ok, why = True, f"output '{key}' of {tools[a].name} feeds required input of {tools[b].name}"
        else:
            shared = sorted(keys[a] & keys[b])
            if shared:
                ok, why = True, f"similar parameters sharing {', '.join(shared[:3])} (cos {w:.2f})"
            elif w >= cfg.threshold + 0.1:
                ok, why = True, f"strongly similar (cos {w:.2f})"
            else:
                ok, why = False, f"weakly similar, no shared key (cos {w:.2f})"
        decisions.append({"src": tools[a].name, "dst": tools[b].name, "kind": kind, "weight": round(float(w), 4),
                          "confirmed": ok, "reason": why})
        if ok:
            confirmed_nodes.update((a, b))
    kept, dropped = [], []
    if len(members) < 3:
        return [int(m) for m in members], decisions, dropped
    total = vecs[members].sum(axis=0)
    for m in members:
        m = int(m)
        if m in confirmed_nodes:
            kept.append(m)
            continue
        rest = unit(total - vecs[m])
        sim = float(vecs[m] @ rest)
        if sim < cfg.drop_min_sim:
            dropped.append({"name": tools[m].name, "tool": tools[m].id,
                            "reason": f"no confirmed dependency and cos {sim:.2f} to the domain < {cfg.drop_min_sim}"})
        else:
            kept.append(m)
    if not kept:  # never empty a domain by the check alone
        return [int(m) for m in members], decisions, []
    return kept, decisions, dropped


def _param_keys(tool: Tool) -> set[str]:
    props = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    return {k for k in (snake(p) for p in (props or {})) if k and k not in GENERIC_KEYS}


# --- LLM ------------------------------------------------------------------------------------------

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
    with the model's, falling back to the rule-based ones on a format error. Keeps counts and the
    cost (requests, tokens, seconds) in `.stats` and every domain's outcome in `.log`."""

    def __init__(self, client: LLMClient, max_tokens: int = 1024, json_schema: bool = True):
        self.client, self.max_tokens, self.json_schema = client, max_tokens, json_schema
        self.stats = {"domains": 0, "by_llm": 0, "fallbacks": 0, "edges_flipped": 0, "dropped": 0,
                      "requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}
        self.log: list[dict[str, Any]] = []

    def __call__(self, members, tools: list[Tool], decisions: list[dict], kept: list[int],
                 dropped: list[dict]) -> tuple[list[int], list[dict], list[dict]]:
        members = [int(m) for m in members]
        member_tools = [tools[m] for m in members]
        t0 = time.perf_counter()
        try:
            res = asyncio.run(llm_dependency_check(self.client, member_tools, decisions, self.max_tokens,
                                                   self.json_schema))
        finally:
            self.stats["requests"] += 1
            self.stats["seconds"] = round(self.stats["seconds"] + time.perf_counter() - t0, 3)
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
