"""Rollout engine utilization: the share of LLM concurrency slots busy, and simulations per hour.

Starts a scripted OpenAI-compatible endpoint (benchmarks/scripted_llm.py: a real HTTP server that
answers like a tool-calling model after a fixed delay, calling each scenario's gold calls) and
runs the real engine against it on the shop fixture with the scripted user and the sandboxed
environment. The server integrates its number of requests in flight over time; utilization =
mean in flight / concurrency in the steady state (first conversation finished .. last one started;
before it the environments' sandboxed workers are still starting).
The anchor, tau2-bench's 21.6 of 30 slots busy (72%), is quoted (a development note; tau2 is not run
here against the scripted endpoint); the target here is >= 95%.

    .venv/bin/python benchmarks/bench_rollout.py [--quick] [--concurrency 64] [--delay 0.2] [--trials 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.artifacts import load_trajectories  # noqa: E402
from agentscaler.llm import LLMClient  # noqa: E402
from agentscaler.llm_server import free_port  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from benchmarks.results_io import Anchor, Figure, Recorder  # noqa: E402
from tasks.rollouts.conversation import RolloutConfig  # noqa: E402
from tasks.rollouts.engine import rollout_async, select_scenarios  # noqa: E402
from tasks.scenarios.build import build_scenarios  # noqa: E402
from tests.conftest import load_shop_builder  # noqa: E402


def poll(url: str, out: list[dict], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            out.append(httpx.get(url + "/stats", timeout=5).json())
        except httpx.HTTPError:
            pass
        stop.wait(0.5)


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=None, help="default 64 (quick 16)")
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--trials", type=int, default=None, help="default 60 (quick 6)")
    ap.add_argument("--quick", action="store_true", help="bounded: 6 trials of 20 shop scenarios")
    ap.add_argument("--in-flight", type=int, default=None, help="conversations at once (default 2 x concurrency)")
    a = ap.parse_args()
    a.trials = a.trials or (6 if a.quick else 60)
    a.concurrency = a.concurrency or (16 if a.quick else 64)
    with Recorder("rollout") as rec, tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        load_shop_builder()(ws.domain_dir("shop"))
        build_scenarios(ws, "shop", per_domain=20, seed=0)
        scen = select_scenarios(ws, "all")
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "benchmarks.scripted_llm", "--port", str(port), "--delay",
                                   str(a.delay), "--scenarios", str(ws.domain_dir("shop") / "scenarios.jsonl")],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/v1"
        try:
            for _ in range(200):
                try:
                    httpx.get(url + "/models", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.05)
            cfg = RolloutConfig(max_in_flight=a.in_flight, unsafe=os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1")
            samples: list[dict] = []
            stop = threading.Event()
            th = threading.Thread(target=poll, args=(url, samples, stop), daemon=True)

            async def go() -> dict:
                async with LLMClient(url, model="scripted", concurrency=a.concurrency, timeout=60) as c:
                    th.start()
                    return await rollout_async(ws, scen, "bench", c, trials=a.trials, cfg=cfg)

            cpu0 = os.times()
            rep = asyncio.run(go())
            cpu1 = os.times()
            trajs = load_trajectories(ws, "bench")
            stop.set()
            th.join()
            server_cpu = cpu_of(server.pid)
        finally:
            server.terminate()
            server.wait(10)
        wall = rep["wall_s"]
        # steady state: from the first finished conversation (every environment of the first wave is
        # open by then) to the start of the last conversation (after it, the queue drains)
        t_a = min(t.timings["started"] + t.timings["total_s"] for t in trajs)
        t_b = max(t.timings["started"] for t in trajs)
        win = [s for s in samples if t_a <= s["wall"] <= t_b]
        steady = None
        if len(win) >= 2:
            steady = (win[-1]["busy_integral"] - win[0]["busy_integral"]) / ((win[-1]["now"] - win[0]["now"]) * a.concurrency)
        mid = [s for s in samples if s["span_s"] > 0]
        whole = mid[-1]["mean_in_flight"] / a.concurrency if mid else None
        out = {"concurrency": a.concurrency, "delay_s": a.delay, "conversations": rep["written"],
               "max_in_flight": rep["max_in_flight"], "wall_s": wall,
               "slot_utilization_steady": round(steady, 4) if steady is not None else None,
               "steady_window_s": round(t_b - t_a, 2), "warmup_s": round(t_a - min(t.timings["started"] for t in trajs), 2),
               "slot_utilization_whole_run_server": round(whole, 4) if whole is not None else None,
               "slot_utilization_whole_run_client": rep["slot_utilization"],
               "sims_per_hour_per_process": rep["sims_per_hour"],
               "median_conversation_s": rep["median_conversation_s"],
               "median_split_s": {k: round(statistics.median(t.timings.get(k, 0.0) for t in trajs), 4)
                                  for k in ("agent_llm_s", "tool_s", "goal_check_s")}, "end_reasons": rep["end_reasons"],
               "llm_requests": rep["llm"].get("rollout_agent", {}).get("server_calls"), "errors": rep["errors"][:5],
               "engine_cpu_s": round(cpu1.user - cpu0.user + cpu1.system - cpu0.system, 2),
               "server_cpu_s": round(server_cpu, 2), "load_average": os.getloadavg(),
               "tau2_reference_utilization_quoted": round(21.6 / 30, 3)}
        print(json.dumps(out, indent=2))
    wl = (f"fixture: shop domain, 20 scenarios x {a.trials} trials, scripted endpoint ({a.delay * 1e3:.0f} ms per "
          f"request), scripted user" + (" (quick)" if a.quick else ""))
    quoted = Anchor(value=72.0, unit="%", kind="quoted",
                    source="tau2-bench 21.6 of 30 slots busy, from a development note (bench_rollout.py since 088a870); "
                           "not re-measured")
    if steady is not None:
        rec.figures.append(Figure(name=f"LLM slot use, steady state, concurrency {a.concurrency}", value=steady * 100,
                                  unit="%", workload=wl, anchor=quoted, ratio_to_anchor=steady * 100 / 72.0,
                                  aim=">= 95%", meets_aim=steady >= 0.95))
    if whole is not None:
        rec.figures.append(Figure(name=f"LLM slot use, whole run (server side), concurrency {a.concurrency}",
                                  value=whole * 100, unit="%", workload=wl))
    rec.figures.append(Figure(name="simulations per hour per process", value=rep["sims_per_hour"], unit="/h",
                              workload=wl))
    rec.figures.append(Figure(name="conversation time", value=rep["median_conversation_s"], unit="s",
                              median=rep["median_conversation_s"], workload=wl))
    rec.layers = ["sandbox: " + ("off" if cfg.unsafe else "bwrap + seccomp + rlimits"), "fresh sandbox child per episode"]
    print(rec.write("```json\n" + json.dumps(out, indent=2) + "\n```"))


if __name__ == "__main__":
    main()
