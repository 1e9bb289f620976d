"""A scripted OpenAI-compatible chat endpoint (starlette + uvicorn) for benchmarks and logic tests.

Not a model: it answers like a tool-calling model from a script, after a fixed delay, so the
rollout engine's own behaviour (concurrency, slot use, retries, recording) can be measured and
tested without model noise. Modes (the agent side; requests carrying `tools`):
- oracle: finds the scenario by its intent (the first user message), calls its gold calls one
  by one, then answers with the last tool result (a perfect agent);
- chatty: never calls a tool, always says it will do it (for stop-refusal and no_tool_calls);
- coin: oracle when the request's seed (the trial) is even, chatty when it is odd (rejection
  sampling with a known acceptance: half the samples of every scenario pass);
- looper: makes the scenario's first gold call again after every tool result, never answering (a
  model that loops to the step limit, for settled-failure stops);
Requests without tools (a simulated user) get a request first, then "Thanks. ###STOP###".
GET /stats: requests served, the time-averaged number in flight since the first request, and how
many agent requests carried each repeat_penalty (what our client sends, for tests of the setting).

    python -m benchmarks.scripted_llm --port P --delay 0.2 --scenarios domains/x/scenarios.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class Script:
    def __init__(self, scenario_files: list[str], mode: str = "oracle", delay: float = 0.2, fail_first: int = 0,
                 scenarios_glob: str | None = None):
        self.mode, self.delay, self.fail_first = mode, delay, fail_first
        self.scenarios_glob = scenarios_glob  # re-read on an unknown intent (scenarios written after start)
        self.gold: dict[str, list[dict[str, Any]]] = {}
        self._load(scenario_files)
        self.requests = self.in_flight = 0
        self.t_first = self.t_last = None
        self.busy = 0.0  # integral of in-flight over time
        self.agent_sampling: dict[str, int] = {}  # the agent requests' repeat_penalty (JSON text) -> count
        self._t = None

    def _load(self, files: list[str]) -> None:
        for f in files:
            for line in Path(f).read_text().splitlines():
                if line.strip():
                    s = json.loads(line)
                    self.gold[s["intent"]] = s["gold_calls"]

    def _tick(self, delta: int) -> None:
        now = time.monotonic()
        if self._t is not None:
            self.busy += self.in_flight * (now - self._t)
        self._t = now
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        self.in_flight += delta

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body.get("messages", [])
        if not body.get("tools"):  # the simulated user: asks once, then stops
            if len(msgs) <= 2:
                return _text("Hi, I need help with my order.")
            return _text("Thanks. ###STOP###")
        if self.mode == "chatty" or (self.mode == "coin" and int(body.get("seed") or 0) % 2):
            return _text("I will take care of that right away, one moment please.")
        intent = next((m.get("content") for m in msgs if m.get("role") == "user"), "")
        gold = self.gold.get(intent)
        if gold is None and self.scenarios_glob:
            import glob

            self._load(sorted(glob.glob(self.scenarios_glob)))
            gold = self.gold.get(intent)
        if gold is None:
            return _text("How can I help you?")
        done = sum(len(m.get("tool_calls") or []) for m in msgs if m.get("role") == "assistant")
        if done < len(gold) or self.mode == "looper":
            c = gold[0 if self.mode == "looper" else done]
            return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{"id": f"call_{done}", "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}]}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
        last = next((m.get("content") for m in reversed(msgs) if m.get("role") == "tool"), "")
        return _text(f"Done. Here is the result: {last}")


def _text(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112}}


def make_app(script: Script) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        script._tick(+1)
        script.requests += 1
        try:
            body = await request.json()
            if body.get("tools"):
                seen = json.dumps(body.get("repeat_penalty"))
                script.agent_sampling[seen] = script.agent_sampling.get(seen, 0) + 1
            await asyncio.sleep(script.delay)
            if script.requests <= script.fail_first:
                return JSONResponse({"error": "warming up"}, status_code=503)
            return JSONResponse({"id": "x", "object": "chat.completion", "model": body.get("model", "scripted"),
                                 **script.answer(body)})
        finally:
            script._tick(-1)

    async def stats(request: Request) -> JSONResponse:
        now = time.monotonic()
        busy = script.busy + (script.in_flight * (now - script._t) if script._t is not None else 0.0)
        span = (script.t_last - script.t_first) if script.t_first is not None else 0.0
        return JSONResponse({"requests": script.requests, "span_s": span, "now": now, "wall": time.time(), "busy_integral": busy,
                             "in_flight": script.in_flight, "mean_in_flight": script.busy / span if span else 0.0,
                             "agent_repeat_penalty": script.agent_sampling})

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "scripted"}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/stats", stats), Route("/v1/models", models)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--mode", default="oracle", choices=["oracle", "chatty", "coin", "looper"])
    ap.add_argument("--scenarios", nargs="*", default=[])
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--scenarios-glob", default=None, help="Scenario files to (re-)read on an unknown intent.")
    a = ap.parse_args()
    import uvicorn

    uvicorn.run(make_app(Script(a.scenarios, a.mode, a.delay, a.fail_first, a.scenarios_glob)), host="127.0.0.1", port=a.port,
                log_level="warning", backlog=2048)


if __name__ == "__main__":
    main()
