"""The fast path decides exactly as the slow one: a whole run verified at once (domains two at a
time, many trajectories per sandbox round trip, workers opened ahead, each line rewritten from the
JSON it was read from) gives every trajectory the verdict it gets verified alone, one domain and
one trajectory at a time; and the rewritten file holds the trajectories as read, verdicts added.

Honest gold replays (real sandbox) on two domains, and crafted breaks of them, one per kind.
"""

from __future__ import annotations

import json
import shutil

import pytest

from agentscaler.artifacts import TRAJECTORIES, load_scenarios, load_trajectories
from agentscaler.models import Trajectory
from agentscaler.workspace import Workspace
from envs.episode import Environment
from tasks.rollouts.conversation import trajectory_id
from tasks.rollouts.gold import gold_trajectory
from tasks.verify.replay import Replayer
from tasks.verify.verify import verify_run, verify_trajectories


def _breaks(g: Trajectory) -> list[Trajectory]:
    """Copies of one gold replay, each broken one way (some stay honest)."""
    out = []

    def copy(k: int) -> Trajectory:
        return g.model_copy(deep=True, update={"id": trajectory_id("b", g.id, k), "trial": k})

    tools = [i for i, m in enumerate(g.messages) if m["role"] == "tool"]
    calls = [i for i, m in enumerate(g.messages) if m["role"] == "assistant" and m.get("tool_calls")]
    t = copy(1)
    t.final_hash = "0" * 32  # forged hash
    out.append(t)
    t = copy(2)
    t.messages[tools[0]]["content"] += " (forged)"  # forged output
    out.append(t)
    t = copy(3)
    del t.messages[calls[-1]:calls[-1] + 2]  # missing last call, no recorded state
    t.final_hash = ""
    out.append(t)
    t = copy(4)
    t.messages[calls[0]]["tool_calls"][0]["function"]["name"] = "drop_tables"  # unknown tool
    out.append(t)
    t = copy(5)
    t.messages[calls[0]]["tool_calls"][0]["function"]["arguments"] = json.dumps({"nope": 5})  # invalid arguments
    out.append(t)
    t = copy(6)
    del t.messages[calls[0]]  # a tool result without its call
    out.append(t)
    t = copy(7)
    t.end_reason = "turn_limit"
    out.append(t)
    t = copy(8)
    for _ in range(3):  # the same text three times
        t.messages[-2:-2] = [{"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "ok"}]
    out.append(t)
    out.append(copy(9))  # an honest second trial
    return out


@pytest.fixture(scope="module")
def run(ws: Workspace) -> list[Trajectory]:
    """Gold replays of two domains (shop, and a copy of it under another id) and their breaks."""
    shutil.copytree(ws.domain_dir("shop"), ws.domain_dir("shop2"))
    trajs = []
    for d in ("shop", "shop2"):
        with Environment.open(ws.domain_dir(d)) as env:
            for s in load_scenarios(ws, d)[:6]:
                g = gold_trajectory(s, env, env.tools(), "You are an agent.", "b")
                g = g.model_copy(update={"domain": d, "id": trajectory_id("b", f"{d}/{s.id}", 0)})
                trajs += [g] + _breaks(g)
    return trajs


def test_a_run_at_once_decides_as_one_trajectory_at_a_time(ws: Workspace, run: list[Trajectory]) -> None:
    d = ws.rollout_dir("batched")
    d.mkdir(parents=True)
    (d / TRAJECTORIES).write_text("".join(t.model_dump_json() + "\n" for t in run))
    report = verify_run(ws, "batched")
    assert report["replay"]["trajectories"] == len(run) and not report["replay"]["failed_domains"]
    fast = {t.id: t for t in load_trajectories(ws, "batched")}
    verified = {r["trajectory_id"]: r["verdict"] for r in map(json.loads, (d / "verified.jsonl").read_text().splitlines())}

    alone = []
    with Replayer(ws.root / "domains") as rp:
        for t in run:
            one = t.model_copy(deep=True)
            verify_trajectories(ws, [one], replayer=rp, threads=1)
            alone.append(one)

    assert len(fast) == len(run)
    for t, one in zip(run, alone):
        got = fast[t.id]
        assert got.verdict == one.verdict, (t.id, got.verdict, one.verdict)
        assert verified[t.id] == one.verdict.model_dump()
        assert got.model_dump(exclude={"verdict"}) == t.model_dump(exclude={"verdict"})  # as read, verdict added
    kinds = {tuple(v.verdict.reasons) for v in alone}
    assert () in kinds and len(kinds) >= 7  # honest ones passed; the breaks failed in their own ways
    assert {"recorded_state_mismatch", "output_mismatch", "unknown_tool", "invalid_arguments", "malformed_dialogue",
            "turn_limit", "repetition", "state_mismatch"} <= {r for k in kinds for r in k}
