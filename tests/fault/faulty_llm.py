"""A fault-injecting OpenAI-compatible chat endpoint on loopback (raw asyncio HTTP, no framework).

Not a model: a scripted agent (the test logic is ours: retries, reasons, what reaches training
data). It answers like an "oracle" tool-calling agent: it finds the scenario whose intent is the
conversation's first user message in `<workspace>/domains/*/scenarios.jsonl` (re-read when the
files change), calls its gold calls one by one, then answers with the last tool result. Requests
without `tools` (a simulated user) get "Thanks. ###STOP###".

Faults, popped one per request from a queue (`FaultyLLM.inject(...)`) or drawn at random with
`fault_rate`:
- "500":        HTTP 500 (transient: the client retries)
- "429":        HTTP 429 (transient)
- "400":        HTTP 400 (not transient: fails at once with a reason)
- "timeout":    no answer for `hang_s` seconds (longer than the client's timeout)
- "drop":       the connection is closed after the request is read, no response at all
- "reset":      the connection is closed half-way through the response body
- "malformed":  a tool call whose `arguments` are not valid JSON (LLMFormatError)
- "hermes_bad": a `<tool_call>` in the text with broken JSON (LLMFormatError)
- "endless":    headers, then a chunked body that never ends (the generation never stops)
- "length":     finish_reason "length" with a tool call cut mid-JSON
- "not_json":   a 200 whose body is not JSON
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path
from typing import Any

FAULTS = ("500", "429", "400", "timeout", "drop", "reset", "malformed", "hermes_bad", "endless", "length", "not_json")


def _text(text: str, finish: str = "stop") -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": "faulty",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _call(name: str, arguments: str, call_id: str = "call_0") -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": "faulty",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": call_id, "type": "function",
                                "function": {"name": name, "arguments": arguments}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class FaultyLLM:
    """Start with `with FaultyLLM(workspace) as srv: srv.url` (a thread with its own event loop)."""

    def __init__(self, workspace: Path | str | None = None, fault_rate: float = 0.0, faults: tuple[str, ...] = FAULTS,
                 hang_s: float = 30.0, seed: int = 0):
        self.workspace = Path(workspace) if workspace else None
        self.fault_rate, self.faults, self.hang_s = fault_rate, tuple(faults), hang_s
        self.rng = random.Random(seed)
        self.queue: list[str] = []
        self.served: dict[str, int] = {}
        self.requests = 0
        self._gold: dict[str, list[dict[str, Any]]] = {}
        self._mtimes: dict[str, float] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- control -------------------------------------------------------------------------------
    def inject(self, *faults: str) -> None:
        for f in faults:
            if f not in FAULTS:
                raise ValueError(f"unknown fault {f!r}")
        with self._lock:
            self.queue.extend(faults)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def faults_served(self) -> int:
        return sum(n for k, n in self.served.items() if k != "ok")

    def __enter__(self) -> "FaultyLLM":
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="faulty-llm", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("faulty LLM endpoint did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        loop = self._loop
        if loop is None:
            return

        async def stop() -> None:
            self._server.close()
            for t in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                t.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)

    # --- oracle --------------------------------------------------------------------------------
    def _refresh(self) -> None:
        if self.workspace is None:
            return
        for p in (self.workspace / "domains").glob("*/scenarios.jsonl"):
            try:
                m = p.stat().st_mtime
            except FileNotFoundError:
                continue
            if self._mtimes.get(str(p)) == m:
                continue
            self._mtimes[str(p)] = m
            for line in p.read_text("utf-8").splitlines():
                try:
                    s = json.loads(line)
                    self._gold[s["intent"]] = s["gold_calls"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body.get("messages") or []
        if not body.get("tools"):
            return _text("Thanks. ###STOP###")
        self._refresh()
        intent = next((m.get("content") for m in msgs if m.get("role") == "user"), "")
        gold = self._gold.get(intent)
        if gold is None:
            return _text("How can I help you?")
        done = sum(len(m.get("tool_calls") or []) for m in msgs if m.get("role") == "assistant")
        if done < len(gold):
            c = gold[done]
            return _call(c["name"], json.dumps(c["arguments"]), f"call_{done}")
        last = next((m.get("content") for m in reversed(msgs) if m.get("role") == "tool"), "")
        return _text(f"Done. Here is the result: {last}")

    def _next_fault(self) -> str:
        with self._lock:
            if self.queue:
                return self.queue.pop(0)
            if self.fault_rate and self.rng.random() < self.fault_rate:
                return self.rng.choice(self.faults)
        return "ok"

    # --- HTTP ----------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                n = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(n) if n else b""
                if method == "GET":
                    await self._send(writer, 200, {"data": [{"id": "faulty"}]})
                    continue
                self.requests += 1
                fault = self._next_fault()
                self.served[fault] = self.served.get(fault, 0) + 1
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    await self._send(writer, 400, {"error": "request body is not JSON"})
                    continue
                if not await self._fault(fault, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    async def _fault(self, fault: str, body: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False = the connection is to be closed."""
        tools = body.get("tools") or [{"function": {"name": "noop"}}]
        name = tools[0].get("function", {}).get("name", "noop")
        if fault == "ok":
            await self._send(writer, 200, self.answer(body))
        elif fault in ("500", "429", "400"):
            await self._send(writer, int(fault), {"error": f"injected {fault}"})
        elif fault == "timeout":
            await asyncio.sleep(self.hang_s)
            return False
        elif fault == "drop":
            return False
        elif fault == "reset":
            data = json.dumps(self.answer(body)).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(data)}\r\n\r\n".encode() + data[: len(data) // 2])
            await writer.drain()
            return False
        elif fault == "malformed":
            await self._send(writer, 200, _call(name, '{"id": "x", "count": 3,,'))
        elif fault == "hermes_bad":
            await self._send(writer, 200, _text(f'<tool_call>{{"name": "{name}", "arguments": {{"a": </tool_call>'))
        elif fault == "length":
            await self._send(writer, 200, _text(f'<tool_call>{{"name": "{name}", "arguments": {{"a": "aaaaaa', "length"))
        elif fault == "not_json":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n<html>oop")
            await writer.drain()
        elif fault == "endless":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b'{"choices": [{"message": {"content": "'
            try:
                while True:
                    writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    await writer.drain()
                    chunk = b"blah " * 20
                    await asyncio.sleep(0.01)
            except (ConnectionError, asyncio.CancelledError):
                return False
        return True

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        reason = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "X")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()
