"""Local LLM server figures: start time, short-chat latency, generation tokens/s, tool-call latency,
cache replay latency, and throughput at concurrency 1 vs 2 (llama-cpp-python serves one request
at a time, so concurrency buys little here; vLLM batches).

    .venv/bin/python benchmarks/bench_llm.py [--n 5] [--starts 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from agentscaler.llm import LLMClient, LLMFormatError
from agentscaler.llm_server import local_server

TOOLS = [{"type": "function", "function": {
    "name": "get_user_details", "description": "Get a user's details by id.",
    "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}}]


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5, help="requests per measurement")
    ap.add_argument("--starts", type=int, default=2, help="server starts to time")
    args = ap.parse_args()
    out: dict = {}
    starts = []
    for _ in range(args.starts - 1):
        t0 = time.perf_counter()
        with local_server():
            starts.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    with local_server() as url, tempfile.TemporaryDirectory() as tmp:
        starts.append(time.perf_counter() - t0)
        out["server_start_s_median"] = med(starts)
        client = LLMClient(url, timeout=300, cache_path=Path(tmp) / "c.sqlite")
        short, gen_tps, tool = [], [], []
        for i in range(args.n):
            r = client.chat_sync([{"role": "user", "content": "Say hello."}], max_tokens=16, stage="short", cache_salt=i,
                                 temperature=0.7, seed=i)
            short.append(r.latency_s)
            r = client.chat_sync([{"role": "user", "content": "Write a long story about a robot."}], max_tokens=128,
                                 stage="long", cache_salt=i, temperature=0.7, seed=i)
            gen_tps.append(r.usage["completion_tokens"] / r.latency_s)
            try:
                r = client.chat_sync([{"role": "system", "content": "You help users."},
                                      {"role": "user", "content": f"Show me user u{i}."}], tools=TOOLS,
                                     tool_choice="required", max_tokens=96, stage="tool", cache_salt=i)
            except LLMFormatError:  # counted in stats()["tool"]["format_errors"]
                continue
            tool.append(r.latency_s)
        out["short_chat_latency_s_median"] = med(short)
        out["generation_tokens_per_s_median"] = round(statistics.median(gen_tps), 1)
        out["tool_call_latency_s_median"] = med(tool) if tool else None
        out["tool_calls_parsed"] = f"{len(tool)}/{args.n}"
        replay = []
        for i in range(args.n):
            t = time.perf_counter()
            r = client.chat_sync([{"role": "user", "content": "Say hello."}], max_tokens=16, stage="short", cache_salt=i,
                                 temperature=0.7, seed=i)
            assert r.cached
            replay.append(time.perf_counter() - t)
        out["cache_replay_latency_ms_median"] = round(statistics.median(replay) * 1000, 2)
        out["cache_speedup_x"] = round(out["short_chat_latency_s_median"] / statistics.median(replay), 0)

        async def burst(c: LLMClient, n: int) -> float:
            t = time.perf_counter()
            await asyncio.gather(*[c.chat([{"role": "user", "content": f"Count to {k}."}], max_tokens=24,
                                          stage="burst", use_cache=False) for k in range(n)])
            return n / (time.perf_counter() - t)

        for conc in (1, 2):
            c = LLMClient(url, timeout=300, concurrency=conc)
            out[f"requests_per_s_concurrency_{conc}"] = round(asyncio.run(burst(c, 2 * args.n)), 2)
        out["stats"] = client.stats()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
