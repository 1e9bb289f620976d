"""Per-request cost of multi-turn evaluation requests: interleaved on a single-slot server vs each on its lane.

bench_prefix measures a conversation's first request (the domain's system prompt and tools). Later
turns repeat the whole conversation so far: against llama.cpp's one slot, the prompt cache serves it
only when the slot's last request was the same conversation's previous turn. The rollout engine used
to keep two conversations in flight per server (and sent each turn to the least busy server), so
turns of different conversations alternated on a slot and each evaluated its whole context; now each
conversation holds one server for all its turns (tasks.rollouts.engine.lanes).

This script takes recorded conversations (a rollout run's trajectories: the agent requests are the
messages before each assistant turn, with the run's tools, temperature and the trial's seed) and sends
the same requests to one server in two orders, side by side in one run (arms alternate with
--repeats): two conversations alternating turn by turn (the old engine at best: it also moved turns
between servers) and one conversation after another (a lane). Replies are generated afresh
(use_cache=False); the next request is the recorded conversation, so both arms send identical bodies.

    .venv/bin/python benchmarks/bench_lanes.py --run-dir WS/rollouts/RUN [--checkpoint DIR | --model GGUF]
        [--pairs 2] [--turns 8] [--repeats 1] [--threads 1] [--n-ctx 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentscaler.endpoints import LOCAL, serve  # noqa: E402
from agentscaler.llm import LLMClient, LLMFormatError  # noqa: E402
from agentscaler.llm_server import default_model_path, local_server  # noqa: E402
from benchmarks.results_io import Anchor, Figure, Recorder  # noqa: E402

INTERLEAVED, LANES = "interleaved (2 conversations alternate on the slot)", "lanes (one conversation at a time)"


def requests_of(traj: dict[str, Any], turns: int, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent requests of a recorded conversation: the messages before each assistant turn."""
    msgs = traj["messages"]
    return [{"messages": msgs[:i], "tools": traj["tools"], "temperature": cfg.get("temperature", 0.0),
             "max_tokens": cfg.get("max_tokens", 256), "seed": traj["trial"]}
            for i, m in enumerate(msgs) if m.get("role") == "assistant"][:turns]


def pick(run_dir: Path, pairs: int, turns: int) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """2 * pairs conversations with at least `turns` agent turns, each of another scenario (longest first)."""
    cfg = json.loads((run_dir / "run.json").read_text()).get("config", {})
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: (-sum(m.get("role") == "assistant" for m in r["messages"]), r["id"]))
    chosen, seen = [], set()
    for r in rows:
        reqs = requests_of(r, turns, cfg)
        if len(reqs) >= turns and r["scenario_id"] not in seen:
            chosen.append(reqs)
            seen.add(r["scenario_id"])
        if len(chosen) == 2 * pairs:
            break
    return chosen, cfg


async def send(client: LLMClient, req: dict[str, Any]) -> tuple[float, int]:
    t = time.perf_counter()
    try:
        reply = await client.chat(req["messages"], tools=req["tools"], temperature=req["temperature"],
                                  max_tokens=req["max_tokens"], seed=req["seed"], use_cache=False, stage="bench")
    except LLMFormatError:  # a malformed reply costs the server the same work
        return time.perf_counter() - t, 0
    return reply.latency_s, int(reply.usage.get("prompt_tokens", 0))


async def run_arm(client: LLMClient, convs: list[list[dict[str, Any]]], interleave: bool) -> dict[str, Any]:
    order: list[dict[str, Any]] = []
    for a, b in zip(convs[0::2], convs[1::2]):
        order += [x for pair in zip(a, b) for x in pair] if interleave else a + b
    lat, prompt = [], []
    t0 = time.perf_counter()
    for req in order:
        s, n = await send(client, req)
        lat.append(s)
        prompt.append(n)
    return {"requests": len(lat), "wall_s": round(time.perf_counter() - t0, 1),
            "median_s": round(statistics.median(lat), 3), "mean_s": round(statistics.fmean(lat), 3),
            "p90_s": round(sorted(lat)[int(0.9 * (len(lat) - 1))], 3), "median_prompt_tokens": statistics.median(prompt)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, help="a rollout run: WS/rollouts/RUN (trajectories.jsonl, run.json)")
    ap.add_argument("--checkpoint", default=None, help="a trained model's folder (served as its GGUF export)")
    ap.add_argument("--model", default=None, help="a GGUF (default: the shipped SmolLM2-135M)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--turns", type=int, default=8, help="agent requests per conversation")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved/lanes pairs of arms")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--quick", action="store_true", help="1 pair of 6-turn conversations")
    a = ap.parse_args()
    if a.quick:
        a.pairs, a.turns = 1, 6
    run_dir = Path(a.run_dir)
    convs, cfg = pick(run_dir, a.pairs, a.turns)
    if len(convs) < 2:
        sys.exit(f"{run_dir}: fewer than 2 conversations of {a.turns} agent turns")
    convs = convs[:len(convs) // 2 * 2]
    arms: dict[str, list[dict[str, Any]]] = {INTERLEAVED: [], LANES: []}
    with Recorder("lanes") as rec:
        if a.checkpoint:
            server = serve(LOCAL, checkpoint=a.checkpoint, threads=a.threads, n_ctx=a.n_ctx)
            model = f"{Path(a.checkpoint).name} (f16 GGUF export)"
        else:
            path = Path(a.model) if a.model else default_model_path()
            server, model = local_server(path, n_threads=a.threads, n_ctx=a.n_ctx, startup_timeout=300), path.name
        with server as url:
            url = url[0] if isinstance(url, list) else url

            async def go() -> None:
                async with LLMClient(url, concurrency=1, timeout=900, max_retries=0) as client:
                    await send(client, {**convs[0][0], "max_tokens": 1})  # load the weights into the page cache
                    for _ in range(a.repeats):
                        arms[INTERLEAVED].append(await run_arm(client, convs, True))
                        arms[LANES].append(await run_arm(client, convs, False))
            asyncio.run(go())
    before = statistics.median(r["median_s"] for r in arms[INTERLEAVED])
    after = statistics.median(r["median_s"] for r in arms[LANES])
    out = {"run": run_dir.name, "model": model, "threads": a.threads, "n_ctx": a.n_ctx, "conversations": len(convs),
           "turns": a.turns, "run_temperature": cfg.get("temperature"), "arms": arms,
           "median_ratio": round(before / after, 2) if after else None}
    print(json.dumps(out, indent=1))
    rec.figures.append(Figure(
        name="per-request cost of multi-turn evaluation requests, one conversation per lane", value=after, unit="s",
        median=after, ratio_to_anchor=round(after / before, 3) if before else None,
        workload=f"real: the {len(convs)} longest recorded conversations of run {run_dir.name} (lanes gain most "
                 f"there), their first {a.turns} agent requests each, {model}, one {a.threads}-thread server",
        anchor=Anchor(value=before, unit="s", kind="measured",
                      source="the same requests, two conversations alternating on the slot, same run"),
        aim="15.6 s / 4 = 3.9 s per request (issue 19)", meets_aim=bool(after and after <= 3.9)))
    rec.layers = ["none: no tool code runs here (recorded conversations)"]
    lines = [f"Recorded conversations: {len(convs)} of run `{run_dir.name}` (longest first, one per scenario), the "
             f"first {a.turns} agent requests of each, sent to one llama.cpp server ({model}, {a.threads} thread(s), "
             f"n_ctx {a.n_ctx}) with the run's temperature ({cfg.get('temperature')}) and each trial's seed; replies "
             "afresh.", "",
             "| arm | requests | median s | mean s | p90 s | median prompt tokens | wall s |", "|---|---|---|---|---|---|---|"]
    for name, runs in arms.items():
        lines += [f"| {name} | {r['requests']} | {r['median_s']} | {r['mean_s']} | {r['p90_s']} | "
                  f"{r['median_prompt_tokens']} | {r['wall_s']} |" for r in runs]
    lines += ["", f"Median per-request cost, interleaved / lanes: **{out['median_ratio']}x**; lanes: {after} s a "
              "request (issue 19's anchor, quoted: 15.6 s, a first request of the demo workspace before prefix reuse)."]
    rec.write("\n".join(lines))


if __name__ == "__main__":
    main()
