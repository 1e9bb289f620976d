"""Verification throughput: trajectories verified per second (read + verdict + write), on the shop fixture.

Builds shop scenarios (real sandbox gold execution), writes N scripted trajectories (a mix of
perfect ones and ones broken in each way the verifier checks), then times `verify_run` R times
and reports medians. Target: >= 2,000 trajectories/s on 2 cores.

    .venv/bin/python benchmarks/bench_verify.py [--n 5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.artifacts import (
    TRAJECTORIES,  # noqa: E402
    load_scenarios,  # noqa: E402
)
from agentscaler.models import Trajectory  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from tasks.rollouts.conversation import trajectory_id  # noqa: E402
from tasks.scenarios.build import build_scenarios  # noqa: E402
from tasks.verify.verify import verify_run  # noqa: E402
from tests.conftest import load_shop_builder  # noqa: E402


def make(s, run: str, trial: int) -> Trajectory:
    msgs = [{"role": "system", "content": "You are a customer-service agent. " * 8}, {"role": "user", "content": s.intent}]
    for i, c in enumerate(s.gold_calls):
        msgs.append({"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": f"c{i}", "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": c.name, "content": json.dumps(c.output)})
    msgs += [{"role": "assistant", "content": "Done: " + json.dumps(s.gold_calls[-1].output)},
             {"role": "user", "content": "Thanks ###STOP###"}]
    t = Trajectory(id=trajectory_id(run, s.id, trial), run_id=run, scenario_id=s.id, domain=s.domain, trial=trial,
                   messages=msgs, final_hash=s.gold_hash, final_diff=s.gold_diff, end_reason="user_stop",
                   tools=[], timings={"total_s": 1.0}, tokens={"agent_prompt": 100})
    k = trial % 5  # 60% perfect, the rest broken in different ways
    if k == 3:
        t.final_hash, t.final_diff = "0" * 16, []
    elif k == 4:
        t.end_reason = "turn_limit"
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        load_shop_builder()(ws.domain_dir("shop"))
        build_scenarios(ws, "shop", per_domain=20, seed=0)
        scen = load_scenarios(ws, "shop")
        per = max(1, a.n // len(scen))
        trajs = [make(s, "bench", k) for s in scen for k in range(per)]
        path = ws.rollout_dir("bench") / TRAJECTORIES
        path.parent.mkdir(parents=True)
        text = "".join(t.model_dump_json() + "\n" for t in trajs)
        times, parts = [], []
        for _ in range(a.repeats):
            path.write_text(text)  # fresh, verdict-free input each time
            t0 = time.perf_counter()
            rep = verify_run(ws, "bench")
            times.append(time.perf_counter() - t0)
            parts.append(rep["seconds"])
        med = statistics.median(times)
        out = {"trajectories": len(trajs), "scenarios": len(scen), "median_s": round(med, 4),
               "trajectories_per_s": round(len(trajs) / med, 1),
               "median_parts_s": {k: round(statistics.median(p[k] for p in parts), 4) for k in parts[0]},
               "passed": rep["passed"], "reasons": {k: v for k, v in rep["reasons"].items() if v},
               "bytes_per_trajectory": len(text) // len(trajs), "target_per_s": 2000}
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
