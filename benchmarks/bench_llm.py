"""Local LLM server figures: start time, short-chat latency, generation tokens/s, tool-call latency,
cache replay latency, and throughput at concurrency 1 vs 2 (llama-cpp-python serves one request
at a time, so concurrency buys little here; vLLM batches).

    .venv/bin/python benchmarks/bench_llm.py [--quick] [--n 5] [--starts 2]

--quick: one server start, 2 requests per measurement, 48-token generations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentscaler.llm import LLMClient, LLMFormatError  # noqa: E402
from agentscaler.llm_server import local_server  # noqa: E402
from benchmarks.results_io import Figure, Recorder  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_user_details", "description": "Get a user's details by id.",
    "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}}]


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 start, 2 requests each, 48-token generations")
    ap.add_argument("--n", type=int, default=None, help="requests per measurement (default 5, quick 2)")
    ap.add_argument("--starts", type=int, default=None, help="server starts to time (default 2, quick 1)")
    args = ap.parse_args()
    args.n = args.n or (2 if args.quick else 5)
    args.starts = args.starts or (1 if args.quick else 2)
    long_tokens = 48 if args.quick else 128
    with Recorder("llm") as rec:
        out = measure(args, long_tokens)
    wl = (f"real: the local llama.cpp server with SmolLM2-135M, {args.n} requests each, "
          f"{long_tokens}-token generations" + (" (quick)" if args.quick else ""))
    rec.figures += [
        Figure(name="local LLM server start", value=out["server_start_s_median"], unit="s", workload=wl),
        Figure(name="short chat latency (16 tokens)", value=out["short_chat_latency_s_median"], unit="s", workload=wl),
        Figure(name="generation speed", value=out["generation_tokens_per_s_median"], unit="tokens/s", workload=wl),
        Figure(name="cache replay latency", value=out["cache_replay_latency_ms_median"], unit="ms", workload=wl),
    ]
    ok, n = (int(x) for x in out["tool_calls_parsed"].split("/"))
    rec.figures.append(Figure(name="forced tool calls parsed", value=ok, unit=f"of {n}", workload=wl))
    if out["tool_call_latency_s_median"] is not None:
        rec.figures.append(Figure(name=f"forced tool call latency ({out['tool_calls_parsed']} parsed)",
                                  value=out["tool_call_latency_s_median"], unit="s", workload=wl))
    rec.layers = ["none: no tool code runs here"]
    rec.write("```json\n" + json.dumps(out, indent=2) + "\n```")
    print(json.dumps(out, indent=2))


def measure(args: argparse.Namespace, long_tokens: int) -> dict:
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
            r = client.chat_sync([{"role": "user", "content": "Write a long story about a robot."}], max_tokens=long_tokens,
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
    return out


if __name__ == "__main__":
    main()
