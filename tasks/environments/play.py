"""`agentscaler play DOMAIN CALLS.json`: run a list of calls in one fresh episode of a domain.

The quickest way for a person (and a test) to see whether a domain behaves: the calls
(`[{"name", "arguments"}]`) run in order in a fresh episode of the sandboxed environment, and the
answer is each call's result, the field diff from the seed and the final state hash:
`{"results": [{"ok", "content", "error"}], "diff": [...], "state_hash": ...}`. A malformed call
(not an object, no name, arguments that are not an object) gets an error result of its own and
the others still run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentscaler.models import Call
from agentscaler.workspace import Workspace
from envs.episode import Environment


class PlayError(ValueError):
    """The domain or the calls file cannot be used at all (not found, not a JSON list)."""


def read_calls(path: Path | str) -> list[Any]:
    """The calls file: a JSON list (each item checked when it runs)."""
    p = Path(path)
    try:
        value = json.loads(p.read_text("utf-8"))
    except OSError as exc:
        raise PlayError(f"{p}: cannot read the calls file: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlayError(f"{p}: not JSON: {exc}") from None
    if not isinstance(value, list):
        raise PlayError(f"{p}: expected a JSON list of calls [{{\"name\", \"arguments\"}}], got {type(value).__name__}")
    return value


def play_calls(ws: Workspace, domain_id: str, calls: list[Any], unsafe: bool = False) -> dict[str, Any]:
    """Run `calls` in one fresh episode of the domain (module docstring)."""
    d = ws.domain_dir(domain_id)
    if not (d / "spec.json").exists():
        raise PlayError(f"no finished environment for domain {domain_id} ({d}/spec.json)")
    env = Environment.open(d, unsafe=unsafe)
    try:
        env.reset()
        results = []
        for i, raw in enumerate(calls):
            try:
                call = Call.model_validate(raw)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(x) for x in err.get("loc", ())) or "call"
                results.append({"ok": False, "content": None,
                                "error": f"call {i}: {where}: {err.get('msg')} (expected {{\"name\", \"arguments\"}})"})
                continue
            res = env.call(call.name, call.arguments)
            results.append({"ok": res.ok, "content": res.content if res.ok else None, "error": res.error})
        return {"results": results, "diff": env.diff(), "state_hash": env.state_hash()}
    finally:
        env.close()
