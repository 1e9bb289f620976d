"""bench_settled's own logic on hand-built recorded conversations (no model: what it counts is ours)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.bench_settled import analyse, settled_at


def _call(args: str) -> list[dict]:
    return [{"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c", "content": "{}"}]


def test_settled_at_counts_requests_after_the_third_identical_call_or_a_malformed_reply(tmp_path: Path) -> None:
    user = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    looping = user + _call('{"id": 1}') * 5
    assert settled_at(looping) == (5, 3)
    broken = user + [{"role": "assistant", "content": "x</tool_call>"}, {"role": "user", "content": "?"}] + _call("{}")
    assert settled_at(broken) == (2, 1)
    fine = user + _call('{"id": 1}') + _call('{"id": 2}') + [{"role": "assistant", "content": "Done."}]
    assert settled_at(fine) == (3, None)
    rows = [{"agent_model": "m", "messages": looping, "verdict": {"passed": False}},
            {"agent_model": "m", "messages": fine, "verdict": {"passed": True}}]
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = analyse(tmp_path)
    assert got["agent_requests"] == 8 and got["requests_after_settled"] == 2 and got["settled_trials"] == 1
    assert got["settled_trials_passed"] == 0 and got["share_saved"] == 0.25
