"""Hand-written Trajectory fixtures for the SFT tests (tests/tasks/sft, tests/training): two general domains, one tau2 domain,
plus the bad cases the export must count: unverified, malformed arguments, duplicate, too long,
not JSON, invalid trajectory)."""

from __future__ import annotations

import json
import os

import pytest

from agentscaler.hashing import content_hash
from agentscaler.models import GOLD_REPLAY, Trajectory, Verdict
from agentscaler.workspace import Workspace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOOLS = {
    "dshop": [{"type": "function", "function": {"name": "get_order", "description": "Look up an order.",
                                                 "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                                                "required": ["order_id"]}}},
              {"type": "function", "function": {"name": "cancel_order", "description": "Cancel an order.",
                                                 "parameters": {"type": "object", "properties": {"order_id": {"type": "string"},
                                                                                                 "reason": {"type": "string"}},
                                                                "required": ["order_id"]}}}],
    "dweather": [{"type": "function", "function": {"name": "get_forecast", "description": "Forecast for a city.",
                                                    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                                                    "days": {"type": "integer"}},
                                                                   "required": ["city"]}}}],
    "tau2-airline": [{"type": "function", "function": {"name": "book_flight", "description": "Book a flight.",
                                                        "parameters": {"type": "object", "properties": {"flight": {"type": "string"},
                                                                                                        "seats": {"type": "integer"}},
                                                                       "required": ["flight"]}}}],
}


def conversation(domain: str, k: int, args: str | None = None, tool_content: str | None = None) -> list[dict]:
    """A verified-looking OpenAI-shaped conversation; `args` is the raw JSON string of the call."""
    name = TOOLS[domain][0]["function"]["name"]
    key = list(TOOLS[domain][0]["function"]["parameters"]["properties"])[0]
    args = args if args is not None else json.dumps({key: f"V{k}x{domain[:3]}"})
    return [
        {"role": "system", "content": f"Agent policy for {domain}: verify identity first."},
        {"role": "user", "content": f"Please help me with request number {k} in {domain}."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": f"call_{k}", "name": name,
         "content": tool_content if tool_content is not None else json.dumps({"status": "ok", "item": k})},
        {"role": "assistant", "content": f"All done: request {k} succeeded with status ok."},
        {"role": "user", "content": "Thanks, bye! ###STOP###"},
    ]


def traj(domain: str, k: int, passed: bool = True, agent_model: str = "smollm2-135m", **kw) -> Trajectory:
    scen = content_hash({"d": domain, "k": k})
    return Trajectory(id=content_hash({"r": "run1", "s": scen, "k": kw.get("args")}), run_id="run1",
                      scenario_id=scen, domain=domain, messages=conversation(domain, k, **kw), tools=TOOLS[domain],
                      agent_model=agent_model, verdict=Verdict(passed=passed, reasons=[] if passed else ["state_mismatch"]))


def write_rollouts(ws: Workspace) -> dict[str, int]:
    """Write the fixture run; returns the expected counts."""
    rows = []
    for k in range(6):
        rows.append(traj("dshop", k))
        rows.append(traj("dweather", k))
    for k in range(4):
        rows.append(traj("tau2-airline", k, agent_model=GOLD_REPLAY))  # demonstrations, labelled as such
    rows.append(traj("dshop", 100, passed=False))  # unverified: skipped
    rows.append(traj("dshop", 101, args='{"order_id": "O1"'))  # malformed arguments
    rows.append(traj("dshop", 102, args='["not", "an", "object"]'))  # malformed arguments
    rows.append(traj("dweather", 0))  # duplicate of an earlier row
    rows.append(traj("dweather", 103, tool_content="weather " * 3000))  # too long
    lines = [r.model_dump_json() for r in rows]
    lines.append("{not json")
    lines.append(json.dumps({"id": "x", "run_id": "run1"}))  # invalid trajectory
    path = ws.rollout_dir("run1") / "trajectories.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return {"read": len(lines), "kept": 16, "unverified": 1, "malformed_arguments": 2, "duplicate": 1,
            "too_long": 1, "malformed_json": 1, "invalid_trajectory": 1}


@pytest.fixture(scope="session")
def tokenizer():
    from training.gguf_convert import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def exported(tmp_path_factory, tokenizer):
    """A workspace with the fixture rollouts exported (max_length 1024)."""
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft

    ws = Workspace(tmp_path_factory.mktemp("ws"))
    expected = write_rollouts(ws)
    check_contamination(ws, sources=("tau2",))  # the export refuses an unscreened workspace
    report = export_sft(ws, tokenizer=tokenizer, max_length=1024)
    return ws, report, expected
