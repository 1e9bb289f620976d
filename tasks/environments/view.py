"""What `agentscaler show domain ID` shows: a finished environment's tools (kind, executes), tables, edges, report."""

from __future__ import annotations

from typing import Any

from agentscaler.workspace import Workspace
from envs.spec import DomainSpec


def domain_view(ws: Workspace, domain_id: str) -> dict[str, Any]:
    """The environment of one domain as plain data. Raises FileNotFoundError when it is not finished."""
    d = ws.domain_dir(domain_id)
    if not (d / "spec.json").exists():
        raise FileNotFoundError(f"no finished environment for domain {domain_id} ({d}/spec.json)")
    spec = DomainSpec.load(d)
    per = (spec.report.get("validation") or {}).get("tools") or {}
    return {"id": spec.id, "name": spec.name, "synthesizer": spec.synthesizer,
            "tools": [{"name": t.name, "kind": t.kind, "executes": bool(per.get(t.name, {}).get("executes")),
                       "changes_state": per.get(t.name, {}).get("changes_state"),
                       "reason": per.get(t.name, {}).get("reason")} for t in spec.tools],
            "tables": [{"name": t.name, "primary_key": t.primary_key,
                        "columns": [{"name": c.name, "type": c.type, "foreign_key": c.foreign_key} for c in t.columns]}
                       for t in spec.tables],
            "edges": [e.model_dump() for e in spec.edges],
            "report": {k: v for k, v in spec.report.items() if k not in ("validation", "plans")}}
