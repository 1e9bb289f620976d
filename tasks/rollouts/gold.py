"""Gold replay: demonstrations built from a scenario's gold calls, executed for real in the sandbox.

For each train-split scenario: the user's intent, one assistant turn per gold call with the gold
arguments (in the order constrained decoding writes them: agentscaler.decoding.grammar_order), the real tool output from the sandboxed environment, and a final assistant summary
quoting the last result. They are written as a rollout run whose trajectories are labelled
`agent_model="gold-replay"` (demonstrations made from the scenario generator's ground truth, not
model experience) and are verified like any other run (tasks.verify).
"""

from __future__ import annotations

import json
import time
from typing import Any

from agentscaler.artifacts import TRAJECTORIES, load_scenarios
from agentscaler.decoding import grammar_order
from agentscaler.models import GOLD_REPLAY, Scenario, Trajectory
from agentscaler.workspace import Workspace, atomic_write_text
from envs.episode import Environment
from envs.spec import DomainSpec
from tasks.rollouts.agent import domain_setup
from tasks.rollouts.conversation import trajectory_id
from tasks.rollouts.users import STOP

GOLD_AGENT = GOLD_REPLAY  # the label (agentscaler.models.Trajectory.origin reads it)


def gold_trajectory(scenario: Scenario, env: Any, tools: list[dict[str, Any]], system: str, run_id: str,
                    max_summary_chars: int = 800) -> Trajectory:
    """A demonstration built from the scenario's gold calls, executed for real in `env` (reset here)."""
    env.reset()
    t0 = time.perf_counter()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                      {"role": "user", "content": scenario.intent}]
    last = ""
    params = {t["function"]["name"]: t["function"].get("parameters") for t in tools}
    for i, call in enumerate(scenario.gold_calls):
        cid = f"call_{i}"
        args = grammar_order(params.get(call.name), call.arguments)  # as constrained decoding writes them
        messages.append({"role": "assistant", "tool_calls": [{"id": cid, "type": "function", "function": {
            "name": call.name, "arguments": json.dumps(args, ensure_ascii=False)}}]})
        res = env.call(call.name, call.arguments)
        last = res.text()
        messages.append({"role": "tool", "tool_call_id": cid, "name": call.name, "content": last})
    if len(last) > max_summary_chars:
        last = last[:max_summary_chars] + " ..."
    messages.append({"role": "assistant", "content": f"Done. Here is the result: {last}"})
    messages.append({"role": "user", "content": f"Thank you, that's all I needed. {STOP}"})
    return Trajectory(id=trajectory_id(run_id, scenario.id, 0), run_id=run_id, scenario_id=scenario.id,
                      domain=scenario.domain, trial=0, messages=messages, tools=tools,
                      final_hash=env.state_hash(), final_diff=env.diff(), end_reason="user_stop",
                      timings={"total_s": round(time.perf_counter() - t0, 6)}, agent_model=GOLD_AGENT,
                      user_kind="scripted")


def gold_replay(ws: Workspace, domains: list[str], run_id: str = "gold-replay") -> dict[str, Any]:
    """Write the gold-replayed trajectories of the train-split scenarios of `domains` as run `run_id`."""
    trajs: list[Trajectory] = []
    errors: list[str] = []
    for d in domains:
        spec = DomainSpec.load(ws.domain_dir(d))
        tools, system = domain_setup(spec)
        env = Environment.open(ws.domain_dir(d))
        try:
            for s in load_scenarios(ws, d):
                if s.split != "train":
                    continue
                try:
                    trajs.append(gold_trajectory(s, env, tools, system, run_id))
                except Exception as exc:  # noqa: BLE001 - one scenario, counted
                    errors.append(f"{d}/{s.id}: {type(exc).__name__}: {exc}"[:300])
        finally:
            env.close()
    atomic_write_text(ws.rollout_dir(run_id) / TRAJECTORIES, "".join(t.model_dump_json() + "\n" for t in trajs))
    return {"run_id": run_id, "written": len(trajs), "errors": errors}
