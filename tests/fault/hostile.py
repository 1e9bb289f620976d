"""Hostile generated code for the fault suite: the sandbox attack suite's attacks, delivered through
the LLM synthesizer (scripted model replies) and through Environment on an LLM-synthesized domain.

Reuses ATTACKS / CASES / _write_attacks of tests/envs/test_sandbox_attacks.py (one list of attacks).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from agentscaler.hashing import content_hash
from agentscaler.llm import ChatReply
from tests.envs.test_sandbox_attacks import ATTACKS, CASES, _write_attacks  # noqa: F401
from tests.tasks.environments.test_llm import GOOD_CODE, RECORD, ROWS, TABLES, TOOLS  # noqa: F401


class ScriptedModel:
    """A scripted stand-in for LLMClient.chat (no model): replies in order. The hostile code is ours."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatReply:
        text = self.replies.pop(0) if self.replies else "no more replies"
        return ChatReply(content=text, raw={}, usage={}, latency_s=0.0, finish_reason="stop")


def hostile_code(attack: str, canary_dir: Path) -> str:
    """GOOD_CODE with get_user's body replaced by the attack (SECRET/SEED point at host canaries)."""
    body = textwrap.indent(ATTACKS[attack], "    ")
    head = (f"SECRET = {str(canary_dir / 'secret.txt')!r}\nSEED = {str(canary_dir / 'seed.sqlite')!r}\n\n\n"
            f"def get_user(db, user_id):\n{body}\n\n\n")
    code = GOOD_CODE.split("```python\n", 1)[1].rsplit("```", 1)[0]
    start = code.index("def get_user")
    end = code.index("def search_products")
    return "```python\n" + code[:start] + head + code[end:] + "```"


def canaries(canary_dir: Path) -> dict[str, bytes]:
    canary_dir.mkdir(parents=True, exist_ok=True)
    files = {"secret.txt": b"workspace secret", "seed.sqlite": b"not a database: must stay as it is"}
    for k, v in files.items():
        p = canary_dir / k
        if not p.exists():
            p.write_bytes(v)
    return {k: (canary_dir / k).read_bytes() for k in files}


def synthesize_hostile(ws: Any, attack: str, canary_dir: Path) -> dict[str, Any]:
    """One domain through synthesize_domain(synth="llm") whose model writes hostile code.

    Returns {"failed": bool, "layer": "static" | "sandbox" | "none", "error": str, "spec": bool}."""
    from agentscaler.catalog import Catalog
    from tasks.environments.synthesis import SynthesisError
    from tasks.environments.synthesize import synthesize_domain

    did = "dhostile" + content_hash(attack, 8)
    record = {**RECORD, "domain": did}
    model = ScriptedModel([TABLES, hostile_code(attack, canary_dir), ROWS])
    out: dict[str, Any] = {"attack": attack, "domain": did}
    try:
        spec = synthesize_domain(ws, record, TOOLS, synth="llm",
                                 synth_options={"client": model, "config": {"max_rounds": 1, "fallback": "fail"}})
        out.update(failed=False, layer="none", error="", synthesizer=spec.synthesizer)
    except SynthesisError as exc:
        rep = getattr(exc, "report", None) or getattr(exc.__cause__, "report", None) or {}
        step = (rep.get("errors") or [{}])[-1].get("step", "")
        out.update(failed=True, layer="static" if step == "code" else "sandbox", error=str(exc)[:400])
    st = Catalog(ws.catalog_path).stage_status(did, "synthesize")
    out["catalog"] = st["status"] if st else None
    out["catalog_error"] = (st or {}).get("error")
    out["spec"] = (ws.domain_dir(did) / "spec.json").exists()
    return out


__all__ = ["ATTACKS", "CASES", "GOOD_CODE", "RECORD", "ROWS", "TABLES", "TOOLS", "ScriptedModel", "_write_attacks",
           "canaries", "hostile_code", "synthesize_hostile"]
