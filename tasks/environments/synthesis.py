"""What a synthesizer produces for one domain, and how it fails (shared by the rule-based and the LLM synthesizer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentscaler.errors import DeterministicError
from envs.spec import DomainSpec, Edge


class SynthesisError(DeterministicError):
    """The domain cannot be synthesized (bad record, no tools, nothing executes)."""


@dataclass
class Synthesis:
    """What the rule-based synthesizer produces for one domain (all plain data and text)."""

    spec: DomainSpec
    models_py: str
    tools_py: str
    rows: dict[str, list[dict[str, Any]]]
    skipped: dict[str, str]  # tool name -> reason it was left out


def discovered_edges(names: set[str], given: list[dict[str, Any]] | None) -> list[Edge]:
    """The discovery record's edges between the domain's tools (graph/domains.json), as spec Edges.

    A malformed edge (no src/dst, a weight that is not a number) is skipped, never a failed domain."""
    out: dict[tuple[str, str, str], Edge] = {}
    for g in given or []:
        try:
            src, dst = g["src"], g["dst"]
            kind = g.get("kind") if g.get("kind") in ("similar", "dataflow") else "dataflow"
            if src in names and dst in names and src != dst:
                out[(src, dst, kind)] = Edge(src=src, dst=dst, kind=kind, weight=float(g.get("weight", 1.0)))
        except (KeyError, TypeError, ValueError):
            continue
    return [out[k] for k in sorted(out)]
