"""LLM client logic: retries, timeouts, cache, accounting, strict parsing, endpoint spreading.

These tests talk to a SCRIPTED local HTTP server (a real socket server, started here), not to a
model: they are about our own logic (what happens after 500s, a dropped connection, a reply that
never ends, malformed tool-call JSON), which a real model cannot produce on demand. The real
SmolLM2 server is exercised in test_llm_server.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentscaler.llm import (ChatReply, LLMClient, LLMFormatError, LLMHTTPError, LLMTimeoutError,
                             LLMTransportError, is_transient, parse_json_reply, parse_reply)


def completion(content: str | None = "hi", tool_calls: list | None = None, prompt_tokens: int = 7,
               completion_tokens: int = 3) -> dict:
    msg: dict = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def tc(name: str, arguments: str, id_: str = "call_1") -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


class Scripted:
    """A real HTTP server answering POSTs from a script: each request takes the next action
    (the last one repeats). Actions: ("json", status, obj), ("drop",), ("sleep", s, obj),
    ("trickle",) = headers and a few bytes, then silence until the client gives up."""

    def __init__(self, script: list[tuple]):
        self.script = list(script)
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.requests.append(body)
                    action = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    self._act(action)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

            def _send(self, status: int, obj) -> None:
                data = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _act(self, action: tuple) -> None:
                kind = action[0]
                if kind == "json":
                    self._send(action[1], action[2])
                elif kind == "sleep":
                    time.sleep(action[1])
                    self._send(200, action[2])
                elif kind == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif kind == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    for _ in range(40):  # a byte every 50 ms: no read timeout ever fires, the reply never ends
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(0.05)
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator:
    servers: list[Scripted] = []

    def make(*script: tuple) -> Scripted:
        s = Scripted(list(script))
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


MSGS = [{"role": "user", "content": "hello"}]


def fast_client(url, **kw) -> LLMClient:
    kw.setdefault("backoff_initial", 0.01)
    kw.setdefault("backoff_max", 0.05)
    kw.setdefault("timeout", 2)
    return LLMClient(url, model="m", **kw)


def test_retries_500s_then_succeeds(scripted):
    srv = scripted(("json", 500, {"error": "boom"}), ("json", 503, "busy"), ("json", 200, completion("ok")))
    client = fast_client(srv.url)
    reply = client.chat_sync(MSGS, stage="s")
    assert reply.content == "ok" and not reply.cached
    assert len(srv.requests) == 3
    st = client.stats()["s"]
    assert st["retries"] == 2 and st["server_calls"] == 1 and st["errors"] == 0
    assert st["prompt_tokens"] == 7 and st["completion_tokens"] == 3


def test_429_is_retried_but_400_is_not(scripted):
    srv = scripted(("json", 429, "slow down"), ("json", 200, completion("ok")))
    assert fast_client(srv.url).chat_sync(MSGS).content == "ok"
    bad = scripted(("json", 400, {"error": "bad request"}))
    client = fast_client(bad.url)
    with pytest.raises(LLMHTTPError) as ei:
        client.chat_sync(MSGS)
    assert ei.value.status == 400 and not is_transient(ei.value)
    assert len(bad.requests) == 1
    assert client.stats()["rollout"]["errors"] == 1


def test_dropped_connection_is_retried(scripted):
    srv = scripted(("drop",), ("json", 200, completion("back")))
    assert fast_client(srv.url).chat_sync(MSGS).content == "back"
    assert len(srv.requests) == 2


def test_gives_up_after_max_retries_with_last_transient_error(scripted):
    srv = scripted(("drop",))
    with pytest.raises(LLMTransportError):
        fast_client(srv.url, max_retries=2).chat_sync(MSGS)
    assert len(srv.requests) == 3


def test_slow_reply_times_out_then_retry_succeeds(scripted):
    srv = scripted(("sleep", 1.0, completion("late")), ("json", 200, completion("quick")))
    reply = fast_client(srv.url, timeout=0.3).chat_sync(MSGS)
    assert reply.content == "quick" and len(srv.requests) == 2


def test_reply_that_never_ends_hits_the_total_timeout(scripted):
    """The server keeps sending a byte every 50 ms: httpx's read timeout never fires, our total one must."""
    srv = scripted(("trickle",))
    t0 = time.perf_counter()
    with pytest.raises(LLMTimeoutError):
        fast_client(srv.url, timeout=0.4, max_retries=1).chat_sync(MSGS)
    # two 0.4 s attempts plus backoff; without the total timeout the two trickles take >= 4 s. 3.5 s leaves
    # room for a loaded machine (2.18 s seen at load 25) and still fails a broken timeout.
    assert time.perf_counter() - t0 < 3.5
    assert len(srv.requests) == 2


def test_malformed_tool_call_arguments_raise_with_raw_text(scripted):
    srv = scripted(("json", 200, completion(None, [tc("get_user", '{"user_id": "u1"')])))
    client = fast_client(srv.url)
    with pytest.raises(LLMFormatError) as ei:
        client.chat_sync(MSGS, tools=[{"type": "function", "function": {"name": "get_user", "parameters": {}}}])
    assert ei.value.raw == '{"user_id": "u1"' and "get_user" in str(ei.value)
    assert len(srv.requests) == 1  # a format error is not retried
    assert client.stats()["rollout"]["format_errors"] == 1


@pytest.mark.parametrize("args, why", [('["u1"]', "JSON object"), ("42", "JSON object"), ("", "JSON object"),
                                       ("{'user_id': 'u1'}", "not valid JSON")])
def test_tool_call_arguments_must_be_a_json_object(args, why):
    with pytest.raises(LLMFormatError, match=why):
        parse_reply(completion(None, [tc("f", args)]))


def test_deeply_nested_arguments_are_a_format_error():
    """An agent's tool call nested 100,000 levels raised RecursionError out of parse_reply (the
    rollout then ended as an environment failure); one nested 100 levels passed and could raise
    later, when hashed or encoded from a deeper stack. Both are the model's format error now."""
    deep = "[" * 100_000 + "]" * 100_000
    for bad in (completion(None, [tc("f", '{"a": ' + deep + "}")]),
                completion(None, [tc("f", '{"a": ' + "[" * 100 + "]" * 100 + "}")]),
                completion('<tool_call>{"name": "f", "arguments": {"a": ' + deep + '}}</tool_call>')):
        with pytest.raises(LLMFormatError, match="deep"):
            parse_reply(bad)
    assert parse_reply(completion(None, [tc("f", '{"a": ' + "[" * 30 + "]" * 30 + "}")])).tool_calls
    with pytest.raises(LLMFormatError, match="deep"):
        parse_json_reply(deep)


def test_tool_calls_parse_to_dicts_and_message_round_trips():
    reply = parse_reply(completion(None, [tc("get_user", '{"user_id": "u1"}'), tc("ping", "{}", id_="call_2")]))
    assert reply.tool_calls == [{"id": "call_1", "name": "get_user", "arguments": {"user_id": "u1"}},
                                {"id": "call_2", "name": "ping", "arguments": {}}]
    msg = reply.message()
    assert msg["role"] == "assistant" and json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"user_id": "u1"}


def test_hermes_tool_calls_in_content_are_parsed_strictly():
    text = 'Let me look.\n<tool_call>\n{"name": "get_user", "arguments": {"user_id": "u1"}}\n</tool_call>'
    reply = parse_reply(completion(text))
    assert reply.content == "Let me look."
    assert [(c["name"], c["arguments"]) for c in reply.tool_calls] == [("get_user", {"user_id": "u1"})]
    for bad, why in [('<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>', "not valid JSON"),
                     ('<tool_call>{"name": "f", "arguments": {"a": 1}}', "unbalanced"),
                     ('<tool_call>{"arguments": {}}</tool_call>', "name"),
                     ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "JSON object"),
                     ('<tool_call>{"name": "f", "arguments": {}, "x": 1}</tool_call>', "unexpected keys")]:
        with pytest.raises(LLMFormatError, match=why) as ei:
            parse_reply(completion(bad))
        assert ei.value.raw == bad


def test_no_choices_is_a_format_error():
    with pytest.raises(LLMFormatError, match="no choices"):
        parse_reply({"error": "x"})


def test_cache_replays_and_salt_keeps_trials_apart(scripted, tmp_path):
    srv = scripted(("json", 200, completion("a")), ("json", 200, completion("b")), ("json", 200, completion("c")))
    cache = tmp_path / "llm.sqlite"
    client = fast_client(srv.url, cache_path=cache)
    r1 = client.chat_sync(MSGS, stage="gen")
    r2 = client.chat_sync(MSGS, stage="gen")
    assert (r1.content, r2.content, r2.cached) == ("a", "a", True)
    assert client.chat_sync(MSGS, stage="gen", cache_salt=1).content == "b"  # trial 1 is a separate sample
    assert client.chat_sync(MSGS, stage="gen", temperature=0.7).content == "c"  # sampling params are in the key
    st = client.stats()["gen"]
    assert (st["requests"], st["cache_hits"], st["server_calls"]) == (4, 1, 3)
    asyncio.run(client.aclose())
    # a re-run (new client, same cache file) replays without asking the server
    again = fast_client(srv.url, cache_path=cache)
    assert again.chat_sync(MSGS, stage="gen", cache_salt=1).content == "b"
    assert len(srv.requests) == 3
    assert again.stats()["gen"]["cache_hits"] == 1


def test_cached_malformed_reply_replays_the_same_error(scripted, tmp_path):
    srv = scripted(("json", 200, completion(None, [tc("f", "{bad")])))
    client = fast_client(srv.url, cache_path=tmp_path / "c.sqlite")
    for _ in range(2):
        with pytest.raises(LLMFormatError):
            client.chat_sync(MSGS)
    assert len(srv.requests) == 1


def test_errors_are_not_cached(scripted, tmp_path):
    srv = scripted(("json", 400, "no"), ("json", 200, completion("fine")))
    client = fast_client(srv.url, cache_path=tmp_path / "c.sqlite")
    with pytest.raises(LLMHTTPError):
        client.chat_sync(MSGS)
    assert client.chat_sync(MSGS).content == "fine"


def test_chat_json_is_strict(scripted):
    srv = scripted(("json", 200, completion('{"a": 1}')), ("json", 200, completion('```json\n[1, 2]\n```')),
                   ("json", 200, completion('Sure! {"a": 1}')), ("json", 200, completion('{"a": "x"}')))
    client = fast_client(srv.url)
    assert client.chat_json_sync(MSGS) == {"a": 1}
    assert srv.requests[0]["response_format"] == {"type": "json_object"}
    assert client.chat_json_sync(MSGS) == [1, 2]
    with pytest.raises(LLMFormatError) as ei:
        client.chat_json_sync(MSGS)
    assert ei.value.raw == 'Sure! {"a": 1}'
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    with pytest.raises(LLMFormatError, match="schema at a"):
        client.chat_json_sync(MSGS, schema=schema)
    assert client.stats()["json"]["format_errors"] == 2


def test_parse_json_reply_rejects_empty_and_prose():
    for bad in [None, "", "   ", "{'a': 1}", '{"a": 1} trailing', "```json\n{\"a\": 1}\n``` and more"]:
        with pytest.raises(LLMFormatError):
            parse_json_reply(bad)


def test_concurrency_limit_per_endpoint(scripted):
    srv = scripted(("sleep", 0.15, completion("ok")))
    client = fast_client(srv.url, concurrency=2)

    async def many():
        return await asyncio.gather(*[client.chat(MSGS, cache_salt=i) for i in range(6)])

    t0 = time.perf_counter()
    replies = asyncio.run(many())
    assert all(isinstance(r, ChatReply) for r in replies)
    assert srv.max_in_flight == 2
    assert time.perf_counter() - t0 >= 0.4  # 6 requests, 2 at a time, 0.15 s each


def test_several_endpoints_share_load_and_fail_over(scripted):
    a = scripted(("sleep", 0.1, completion("a")))
    b = scripted(("sleep", 0.1, completion("b")))
    client = fast_client([a.url, b.url], concurrency=1)

    async def many(c):
        return await asyncio.gather(*[c.chat(MSGS, cache_salt=i) for i in range(4)])

    replies = asyncio.run(many(client))
    assert sorted(r.content for r in replies) == ["a", "a", "b", "b"]
    assert a.max_in_flight == 1 and b.max_in_flight == 1
    # a dead endpoint (nothing listens there): retries land on the live one
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    client2 = fast_client([dead, b.url], concurrency=1, max_retries=3)
    assert [r.content for r in asyncio.run(many(client2))] == ["b"] * 4


def test_a_named_endpoint_is_waited_for_while_up_and_left_once_down(scripted):
    """chat(endpoint=...) (a conversation's lane): requests queue for that endpoint's one slot even
    while the other is idle; an endpoint that refuses connections is marked down and left."""
    a = scripted(("sleep", 0.1, completion("a")))
    b = scripted(("sleep", 0.1, completion("b")))
    client = fast_client([a.url, b.url], concurrency=1)

    async def three(c, endpoint):
        return await asyncio.gather(*[c.chat(MSGS, cache_salt=i, endpoint=endpoint) for i in range(3)])

    t0 = time.perf_counter()
    replies = asyncio.run(three(client, a.url))
    assert [r.content for r in replies] == ["a"] * 3 and {r.endpoint for r in replies} == {a.url}
    assert not b.requests and a.max_in_flight == 1 and time.perf_counter() - t0 >= 0.3
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    client2 = fast_client([dead, b.url], concurrency=1, max_retries=3)
    assert [r.content for r in asyncio.run(three(client2, dead))] == ["b"] * 3
