"""Near-duplicate tools of a domain, merged before synthesis (the paper filters them too).

Real corpora carry many copies of one API (`weather_forecast`, `weather_forecast_90611a`,
`weather_forecast_c4cd7e`: one function seen in several BFCL categories with a reworded
description). Two tools are near-duplicates when they have the same kind and their names are
the same once dedupe tags are dropped, or their names share most words; and their parameter
names mostly agree and their descriptions share most words. One representative stays (the one
with the most parameters documented, then the shortest name); the others are recorded as its
aliases and counted, never synthesized.
"""

from __future__ import annotations

import re
from typing import Any

from agentscaler.models import Tool
from agentscaler.naming import name_tokens, snake, strip_tag
from tasks.environments.verbs import core_description

_WORD = re.compile(r"[a-z0-9]+")
_FILL = {"a", "an", "the", "of", "for", "to", "in", "on", "and", "or", "with", "by", "from", "given", "specified",
         "specific", "based", "this", "that", "is", "are", "be", "it", "its", "as", "at", "certain"}


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _FILL}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _params(t: Tool) -> set[str]:
    return {snake(p) for p in (t.parameters.get("properties") or {})}


def near_duplicates(a: Tool, b: Tool, kind_a: str, kind_b: str, params: float = 0.75, text: float = 0.5) -> bool:
    """Same purpose, near-identical schema and description (module docstring)."""
    if kind_a != kind_b:
        return False
    na, nb = strip_tag(a.name).lower(), strip_tag(b.name).lower()
    wa, wb = set(name_tokens(a.name)), set(name_tokens(b.name))
    if na != nb and _jaccard(wa, wb) < 0.6:
        return False
    pa, pb = _params(a), _params(b)
    if _jaccard(pa, pb) < params:
        return False
    req_a, req_b = {snake(p) for p in a.parameters.get("required") or []}, {snake(p) for p in b.parameters.get("required") or []}
    if req_a != req_b and na != nb:
        return False
    return _jaccard(_words(core_description(a.description)), _words(core_description(b.description))) >= text


def _richness(t: Tool) -> tuple[int, int, int, str]:
    props = t.parameters.get("properties") or {}
    documented = sum(1 for s in props.values() if isinstance(s, dict) and s.get("description"))
    return (-len(props), -documented, len(t.name), t.name)


def merge_near_duplicates(tools: list[Tool], kinds: dict[str, str]) -> tuple[list[Tool], dict[str, str]]:
    """(representatives in input order, alias name -> representative name)."""
    groups: list[list[Tool]] = []
    by_base: dict[str, list[int]] = {}
    for t in tools:
        base = strip_tag(t.name).lower()
        placed = False
        # the same base name first (cheap), then every group (names sharing most words)
        for gi in by_base.get(base, []) + [i for i in range(len(groups)) if i not in by_base.get(base, [])]:
            rep = groups[gi][0]
            if near_duplicates(rep, t, kinds[rep.name], kinds[t.name]):
                groups[gi].append(t)
                placed = True
                break
        if not placed:
            groups.append([t])
            by_base.setdefault(base, []).append(len(groups) - 1)
    aliases: dict[str, str] = {}
    keep: set[str] = set()
    for g in groups:
        rep = min(g, key=_richness)
        keep.add(rep.name)
        for t in g:
            if t is not rep:
                aliases[t.name] = rep.name
    return [t for t in tools if t.name in keep], aliases


def alias_report(aliases: dict[str, str]) -> dict[str, Any]:
    """How many tools were merged, grouped by representative (for DomainSpec.report)."""
    by_rep: dict[str, list[str]] = {}
    for a, r in sorted(aliases.items()):
        by_rep.setdefault(r, []).append(a)
    return {"merged": len(aliases), "aliases": by_rep}
