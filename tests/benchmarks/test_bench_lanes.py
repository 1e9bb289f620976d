"""bench_lanes' own logic: which recorded requests it replays and in which order the two arms send them.
The client here is a stand-in that records the order (no model: the bench's server runs are its own job)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

from benchmarks.bench_lanes import pick, run_arm


def _traj(tid: str, scenario: str, trial: int, agent_turns: int) -> dict:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": f"hi {tid}"}]
    for i in range(agent_turns):
        msgs += [{"role": "assistant", "content": f"{tid}-{i}"}, {"role": "user", "content": "go on"}]
    return {"id": tid, "scenario_id": scenario, "trial": trial, "messages": msgs, "tools": [{"type": "function"}]}


def test_pick_takes_long_conversations_of_distinct_scenarios_as_agent_requests(tmp_path: Path) -> None:
    rows = [_traj("a", "s1", 2, 4), _traj("b", "s1", 3, 5), _traj("c", "s2", 0, 3), _traj("d", "s3", 1, 1)]
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.json").write_text(json.dumps({"config": {"temperature": 0.7, "max_tokens": 99}}))
    convs, cfg = pick(tmp_path, pairs=1, turns=3)
    assert cfg["temperature"] == 0.7
    assert [c[0]["messages"][1]["content"] for c in convs] == ["hi b", "hi c"]  # longest first; s1 once; d too short
    b = convs[0]
    assert len(b) == 3 and [r["seed"] for r in b] == [3, 3, 3] and b[0]["max_tokens"] == 99
    assert [r["messages"][-1]["role"] for r in b] == ["user"] * 3  # each request ends before an assistant turn
    assert [len(r["messages"]) for r in b] == [2, 4, 6]


def test_arms_send_the_same_requests_interleaved_or_one_conversation_after_another() -> None:
    sent: list[str] = []

    class Recording:
        async def chat(self, messages, **kw):
            sent.append(messages[-1]["content"])
            return SimpleNamespace(latency_s=0.01, usage={"prompt_tokens": len(messages)})

    convs = [[{"messages": [{"content": f"{c}{i}"}], "tools": [], "temperature": 0, "max_tokens": 1, "seed": 0}
              for i in range(2)] for c in "AB"]
    asyncio.run(run_arm(Recording(), convs, True))
    assert sent == ["A0", "B0", "A1", "B1"]
    sent.clear()
    rep = asyncio.run(run_arm(Recording(), convs, False))
    assert sent == ["A0", "A1", "B0", "B1"] and rep["requests"] == 4
