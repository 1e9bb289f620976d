"""Client for OpenAI-compatible chat completions with tool calling (vLLM, llama.cpp, any proxy).

Why our own small client instead of the openai SDK: we need a per-endpoint concurrency limit,
retries on transient errors only, a replay cache keyed by the full request (a re-run of a
stage replays instead of re-asking), per-stage token/latency accounting, and strict parsing
of tool calls (malformed model output is an error carrying the raw text, never repaired).

    client = LLMClient("http://127.0.0.1:8000/v1", model="smollm2-135m", cache_path=ws.root / "cache" / "llm.sqlite")
    reply = await client.chat(messages, tools=[tool.openai_schema()], stage="rollout", cache_salt=trial)
    reply.tool_calls  # [{"id": ..., "name": ..., "arguments": {...}}]

`base_url` follows the OpenAI convention: it ends with `/v1`; requests go to
`{base_url}/chat/completions`. A list of URLs spreads requests over several servers of the
same model (least busy first, ties round-robin); a retry may land on another server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from agentscaler.hashing import canonical_json, content_hash
from agentscaler.schemas import MAX_VALUE_DEPTH, check, nesting

__all__ = [
    "ChatReply", "LLMClient", "LLMError", "LLMFormatError", "LLMHTTPError", "LLMServerExited", "LLMTimeoutError",
    "LLMTransportError", "LOCAL_SERVERS", "REQUEST_SLOT", "is_transient", "parse_hermes_tool_calls", "parse_json_reply",
    "parse_reply",
]

# Endpoints served by a process this one started (agentscaler.llm_server.serve_process): base URL ->
# a function that says how that process ended, or None while it runs. A dropped connection to one
# of them is then reported as the server's death, not retried as a network error.
LOCAL_SERVERS: dict[str, Callable[[], str | None]] = {}

# A limit shared by every process that talks to the same remote endpoint: REQUEST_SLOT["factory"](),
# when set, is an async context manager held for each request in flight (a retry's backoff holds
# none). flows/common.py sets it to one slot of Prefect's `vllm-endpoint` global concurrency limit
# when a Prefect server is configured; the core knows nothing of Prefect. Requests to a local
# server this process started (one slot of its own) take none.
REQUEST_SLOT: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None] = {"factory": None}


# --- errors -------------------------------------------------------------------------------------

class LLMError(Exception):
    """Base of every error this module raises. `transient` says whether a retry may help."""

    transient: bool = False


class LLMFormatError(LLMError):
    """The model's output is not what was asked for (bad tool-call JSON, not JSON, schema mismatch).

    `raw` keeps the offending text exactly as the server sent it, for reports and debugging.
    """

    def __init__(self, message: str, raw: str | None = None):
        super().__init__(message)
        self.raw = raw


class LLMHTTPError(LLMError):
    """The server answered with an HTTP error. 429 and 5xx are transient, other 4xx are not."""

    def __init__(self, status: int, body: str, url: str):
        super().__init__(f"HTTP {status} from {url}: {body[:500]}")
        self.status, self.body, self.url = status, body, url
        self.transient = status == 429 or status >= 500


class LLMTransportError(LLMError):
    """Connection refused or dropped, or a protocol error: the server may come back."""

    transient = True


class LLMTimeoutError(LLMError):
    """The whole request (connect to last byte) took longer than the per-request timeout."""

    transient = True


class LLMServerExited(LLMError):
    """A server this process started (the local llama.cpp or checkpoint server) has exited, e.g.
    killed by a signal: no retry can help. The message names the signal and the server's log."""


def is_transient(exc: BaseException) -> bool:
    """Retry condition for tenacity and Prefect: only errors a retry can fix."""
    return isinstance(exc, LLMError) and exc.transient


# --- replies ------------------------------------------------------------------------------------

class ChatReply(BaseModel):
    """One parsed assistant turn. `tool_calls` arguments are always dicts."""

    model_config = ConfigDict(extra="forbid")

    content: str | None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)  # {"id", "name", "arguments": dict}
    raw: dict[str, Any]  # the server's JSON, unchanged
    usage: dict[str, int] = Field(default_factory=dict)
    latency_s: float  # of the original server call (also when replayed from the cache)
    finish_reason: str | None = None
    cached: bool = False
    endpoint: str | None = None

    def message(self) -> dict[str, Any]:
        """The assistant message in OpenAI form, to append to the conversation.

        `content` is left out when the turn is only tool calls (llama-cpp-python rejects null)."""
        msg: dict[str, Any] = {"role": "assistant"}
        if self.content is not None or not self.tool_calls:
            msg["content"] = self.content or ""
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                                 for c in self.tool_calls]
        return msg


_HERMES_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _arguments_object(value: Any, where: str, raw: str) -> dict[str, Any]:
    """Arguments must be a JSON object, given as a dict or as a string holding one, nested at most
    MAX_VALUE_DEPTH levels (deeper ones could not be checked, hashed or encoded safely later)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as e:
            raise LLMFormatError(f"{where}: arguments are not valid JSON ({e.msg} at char {e.pos})", raw) from None
        except RecursionError:
            raise LLMFormatError(f"{where}: arguments nest too deeply to read", raw) from None
    if not isinstance(value, dict):
        raise LLMFormatError(f"{where}: arguments must be a JSON object, got {type(value).__name__}", raw)
    if nesting(value, MAX_VALUE_DEPTH) > MAX_VALUE_DEPTH:
        raise LLMFormatError(f"{where}: arguments nest deeper than {MAX_VALUE_DEPTH} levels", raw)
    return value


def parse_hermes_tool_calls(content: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Hermes-style calls in the text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""
    calls: list[dict[str, Any]] = []
    for i, m in enumerate(_HERMES_RE.finditer(content)):
        body = m.group(1).strip()
        where = f"<tool_call> #{i}"
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            raise LLMFormatError(f"{where}: not valid JSON ({e.msg} at char {e.pos})", content) from None
        except RecursionError:
            raise LLMFormatError(f"{where}: the call nests too deeply to read", content) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            raise LLMFormatError(f"{where}: expected an object with a non-empty string 'name'", content)
        extra = set(obj) - {"name", "arguments"}
        if extra:
            raise LLMFormatError(f"{where}: unexpected keys {sorted(extra)}", content)
        args = _arguments_object(obj.get("arguments", {}), where, content)
        calls.append({"id": f"call_{content_hash([i, obj['name'], args], 12)}", "name": obj["name"], "arguments": args})
    rest = _HERMES_RE.sub("", content)
    if "<tool_call>" in rest or "</tool_call>" in rest:
        raise LLMFormatError("unbalanced <tool_call> tags in the reply", content)
    rest = rest.strip()
    return (rest or None), calls


def _int(v: Any) -> int:
    """A token count from a server's usage block; anything that is not a number counts 0."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e15 else 0


def parse_reply(data: dict[str, Any], latency_s: float = 0.0, cached: bool = False,
                endpoint: str | None = None) -> ChatReply:
    """Strictly parse one chat-completions response body (first choice)."""
    raw_text = canonical_json(data)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise LLMFormatError("response has no choices", raw_text)
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise LLMFormatError("choice has no message", raw_text)
    content = msg.get("content")
    if content is not None and not isinstance(content, str):
        raise LLMFormatError(f"message content is {type(content).__name__}, not a string", raw_text)
    tool_calls: list[dict[str, Any]] = []
    raw_calls = msg.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise LLMFormatError(f"tool_calls is {type(raw_calls).__name__}, not a list", raw_text)
    for i, tc in enumerate(raw_calls):
        where = f"tool_calls[{i}]"
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise LLMFormatError(f"{where}: missing function name", raw_text)
        raw_args = fn.get("arguments", "")
        args = _arguments_object(raw_args, f"{where} ({fn['name']})", raw_args if isinstance(raw_args, str) else raw_text)
        call_id = tc.get("id") or f"call_{content_hash([i, fn['name'], args], 12)}"
        tool_calls.append({"id": str(call_id), "name": fn["name"], "arguments": args})
    if not tool_calls and content and ("<tool_call>" in content or "</tool_call>" in content):
        try:
            content, tool_calls = parse_hermes_tool_calls(content)
        except LLMFormatError as e:
            if choice.get("finish_reason") == "length":
                raise LLMFormatError(f"{e} (reply cut off at max_tokens)", e.raw) from None
            raise
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    usage = {k: _int(v) for k, v in usage.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    finish = choice.get("finish_reason")
    return ChatReply(content=content, tool_calls=tool_calls, raw=data, usage=usage, latency_s=latency_s,
                     finish_reason=finish if isinstance(finish, str) else None, cached=cached, endpoint=endpoint)


_FENCE_RE = re.compile(r"^```(?:json)?[ \t]*\n(.*)\n```$", re.DOTALL)


def parse_json_reply(text: str | None, schema: dict[str, Any] | None = None) -> Any:
    """The whole reply must be one JSON value (optionally inside one ```json fence), nothing else.

    With `schema`, the value must also validate against that JSON Schema.
    """
    if text is None:
        raise LLMFormatError("expected a JSON reply, got no content", None)
    body = text.strip()
    fence = _FENCE_RE.match(body)
    if fence:
        body = fence.group(1).strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise LLMFormatError(f"reply is not valid JSON ({e.msg} at char {e.pos})", text) from None
    except RecursionError:
        raise LLMFormatError("reply nests too deeply to read", text) from None
    if schema is not None:
        err = check(schema).first_error(value)
        if err is not None:
            raise LLMFormatError(f"JSON reply does not match the schema at {err[0] or '<root>'}: {err[1]}", text)
    return value


# --- cache --------------------------------------------------------------------------------------

class _Cache:
    """Server responses keyed by the request hash, in one SQLite file (WAL; several processes may share it)."""

    def __init__(self, path: Path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, stage TEXT, request TEXT NOT NULL,"
                         " response TEXT NOT NULL, latency_s REAL NOT NULL, created REAL NOT NULL)")

    def get(self, key: str) -> tuple[dict[str, Any], float] | None:
        with self._lock:
            row = self._db.execute("SELECT response, latency_s FROM replies WHERE key = ?", (key,)).fetchone()
        return (json.loads(row[0]), row[1]) if row else None

    def put(self, key: str, stage: str, request: dict[str, Any], response: dict[str, Any], latency_s: float) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?)",
                             (key, stage, canonical_json(request), json.dumps(response, ensure_ascii=False),
                              latency_s, time.time()))

    def close(self) -> None:
        with self._lock:
            self._db.close()


_POOL_CONNECTIONS = 8  # connections per httpx pool (see LLMClient._bind_loop)


# --- client -------------------------------------------------------------------------------------

class _StageStats:
    def __init__(self) -> None:
        self.requests = self.cache_hits = self.server_calls = self.retries = 0
        self.errors = self.format_errors = 0
        self.prompt_tokens = self.completion_tokens = 0
        self.latencies: list[float] = []

    def as_dict(self) -> dict[str, Any]:
        lat = self.latencies
        return {"requests": self.requests, "cache_hits": self.cache_hits, "server_calls": self.server_calls,
                "retries": self.retries, "errors": self.errors, "format_errors": self.format_errors,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "latency_sum_s": round(sum(lat), 4), "latency_median_s": round(statistics.median(lat), 4) if lat else None}


class LLMClient:
    """Async chat-completions client for one model behind one or more OpenAI-compatible endpoints.

    concurrency: requests in flight per endpoint. timeout: seconds for a whole request (connect to
    last byte), per attempt. max_retries: extra attempts on transient errors (connect errors,
    timeouts, 429, 5xx), with exponential backoff and jitter. cache_path: SQLite file of replies.
    """

    def __init__(self, base_url: str | Sequence[str], model: str = "smollm2-135m", concurrency: int = 8,
                 cache_path: Path | str | None = None, timeout: float = 60, max_retries: int = 4,
                 backoff_initial: float = 0.5, backoff_max: float = 20.0, api_key: str | None = None):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("LLMClient needs at least one base_url")
        self.endpoints = [u.rstrip("/") for u in urls]
        self.model = model
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._cache = _Cache(Path(cache_path)) if cache_path else None
        self._stats: dict[str, _StageStats] = {}
        self._in_flight = {u: 0 for u in self.endpoints}
        self._down_until = {u: 0.0 for u in self.endpoints}
        self._fails = {u: 0 for u in self.endpoints}
        self._rr = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._http: httpx.AsyncClient | None = None
        self._shards: list[httpx.AsyncClient] = []
        self._shard_busy: list[int] = []
        self._cond: asyncio.Condition | None = None

    # one httpx client and condition per event loop, so repeated asyncio.run() calls work
    def _bind_loop(self) -> tuple[httpx.AsyncClient, asyncio.Condition]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._http is None or self._cond is None:
            self._loop = loop
            # Several small connection pools: httpcore scans every connection of a pool on each
            # request event, so one pool of 64+ connections costs O(n^2) CPU (profiled in bench_rollout).
            total = self.concurrency * len(self.endpoints)
            n = max(1, -(-total // _POOL_CONNECTIONS))
            per = -(-total // n)
            limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
            ssl_ctx = httpx.create_ssl_context()  # loading CA certificates takes ~0.5 s: once, shared
            self._shards = [httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), limits=limits, headers=self._headers,
                                              verify=ssl_ctx) for _ in range(n)]
            self._shard_busy = [0] * n
            self._http = self._shards[0]
            self._cond = asyncio.Condition()
        return self._http, self._cond

    def _choose_endpoint(self, prefer: str | None = None) -> str | None:
        """Least busy endpoint with a free slot, preferring ones not marked down; ties round-robin.

        `prefer` (a conversation's lane, tasks.rollouts.engine) is waited for while it is up, so a
        single-slot server's prompt cache keeps serving that conversation; once marked down, any."""
        now = time.monotonic()
        if prefer is not None and prefer in self._in_flight and self._down_until[prefer] <= now:
            return prefer if self._in_flight[prefer] < self.concurrency else None
        pool = [u for u in self.endpoints if self._down_until[u] <= now] or self.endpoints
        free = [u for u in pool if self._in_flight[u] < self.concurrency]
        if not free:
            return None
        least = min(self._in_flight[u] for u in free)
        candidates = [u for u in free if self._in_flight[u] == least]
        return candidates[next(self._rr) % len(candidates)]

    async def _acquire(self, cond: asyncio.Condition, prefer: str | None = None) -> str:
        async with cond:
            while (endpoint := self._choose_endpoint(prefer)) is None:
                try:  # re-check now and then: an endpoint marked down may be due for another try
                    await asyncio.wait_for(cond.wait(), 0.5)
                except TimeoutError:
                    pass
            self._in_flight[endpoint] += 1
            return endpoint

    async def _release(self, cond: asyncio.Condition, endpoint: str, down: bool) -> None:
        # counters first, without awaiting: a cancelled request must still give its slot back
        self._in_flight[endpoint] -= 1
        if down:  # connection refused or dropped: keep new requests away for a while (1, 2, 4 .. 30 s)
            self._fails[endpoint] += 1
            self._down_until[endpoint] = time.monotonic() + min(30.0, 2.0 ** (self._fails[endpoint] - 1))
        else:
            self._fails[endpoint] = 0
            self._down_until[endpoint] = 0.0
        async with cond:  # waiters also re-check every 0.5 s, so a missed notify only delays them
            cond.notify_all()

    def _stage(self, stage: str) -> _StageStats:
        return self._stats.setdefault(stage, _StageStats())

    def request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                     temperature: float = 0.0, max_tokens: int = 512, **params: Any) -> dict[str, Any]:
        """The JSON body sent to /chat/completions (None-valued params are left out)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature,
                                "max_tokens": max_tokens}
        if tools:
            body["tools"] = tools
        body.update({k: v for k, v in params.items() if v is not None})
        return body

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   temperature: float = 0.0, max_tokens: int = 512, stage: str = "rollout",
                   cache_salt: Any = None, use_cache: bool = True, tool_choice: Any = None,
                   top_p: float | None = None, seed: int | None = None, stop: list[str] | None = None,
                   response_format: dict[str, Any] | None = None, endpoint: str | None = None,
                   repeat_penalty: float | None = None) -> ChatReply:
        """One assistant turn. cache_salt (e.g. the trial index) keeps k independent samples of
        the same request apart in the cache. endpoint: send it there (waiting for its slot) while it
        is up, instead of to the least busy one. repeat_penalty: llama.cpp's name (vLLM reads
        `repetition_penalty`, default 1.0, and ignores this field); None sends none. Raises
        LLMFormatError on malformed output, the last transient error once retries are spent,
        LLMHTTPError at once on other 4xx."""
        body = self.request_body(messages, tools, temperature, max_tokens, tool_choice=tool_choice,
                                 top_p=top_p, seed=seed, stop=stop, response_format=response_format,
                                 repeat_penalty=repeat_penalty)
        st = self._stage(stage)
        st.requests += 1
        key = content_hash({"body": body, "salt": cache_salt}, 32)
        hit = self._cache.get(key) if (self._cache is not None and use_cache) else None
        if hit is not None:
            st.cache_hits += 1
            data, latency, served_by, cached = hit[0], hit[1], None, True
        else:
            try:
                data, latency, served_by = await self._post_with_retries(body, st, endpoint)
            except LLMError:
                st.errors += 1
                raise
            cached = False
            st.server_calls += 1
            st.latencies.append(latency)
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
            st.prompt_tokens += _int(usage.get("prompt_tokens"))
            st.completion_tokens += _int(usage.get("completion_tokens"))
            if self._cache is not None and use_cache:
                self._cache.put(key, stage, {"body": body, "salt": cache_salt}, data, latency)
        try:
            return parse_reply(data, latency_s=latency, cached=cached, endpoint=served_by)
        except LLMFormatError:
            st.format_errors += 1
            raise

    async def chat_json(self, messages: list[dict[str, Any]], schema: dict[str, Any] | None = None,
                        json_mode: bool = True, stage: str = "json", **kwargs: Any) -> Any:
        """A reply that must be one JSON value (validated against `schema` if given).

        json_mode asks the server for JSON output (`response_format={"type": "json_object"}`,
        which llama.cpp and vLLM enforce with a grammar); the reply is still checked strictly.
        """
        if json_mode and "response_format" not in kwargs:
            kwargs["response_format"] = {"type": "json_object", **({"schema": schema} if schema else {})}
        reply = await self.chat(messages, stage=stage, **kwargs)
        try:
            return parse_json_reply(reply.content, schema)
        except LLMFormatError:
            self._stage(stage).format_errors += 1
            raise

    def chat_sync(self, *args: Any, **kwargs: Any) -> ChatReply:
        """chat() for synchronous callers (not from inside a running event loop)."""
        return asyncio.run(self.chat(*args, **kwargs))

    def chat_json_sync(self, *args: Any, **kwargs: Any) -> Any:
        return asyncio.run(self.chat_json(*args, **kwargs))

    async def _post_with_retries(self, body: dict[str, Any], st: _StageStats,
                                 prefer: str | None = None) -> tuple[dict[str, Any], float, str]:
        retrying = AsyncRetrying(retry=retry_if_exception(is_transient), stop=stop_after_attempt(self.max_retries + 1),
                                 wait=wait_exponential_jitter(initial=self.backoff_initial, max=self.backoff_max),
                                 reraise=True)
        attempt_no = 0
        async for attempt in retrying:
            with attempt:
                attempt_no += 1
                if attempt_no > 1:
                    st.retries += 1
                async with self._request_slot():
                    return await self._post_once(body, prefer)
        raise AssertionError("unreachable")  # pragma: no cover

    def _request_slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        factory = REQUEST_SLOT["factory"]
        if factory is None or all(u in LOCAL_SERVERS for u in self.endpoints):
            return contextlib.nullcontext()
        return factory()

    @staticmethod
    async def _server_exit(endpoint: str, wait_s: float) -> str | None:
        """How the local server at endpoint ended, if this process started it and it has exited (a
        dropped connection comes a moment before the exit status: wait up to wait_s for it)."""
        check = LOCAL_SERVERS.get(endpoint)
        if check is None:
            return None
        deadline = time.monotonic() + wait_s
        while (why := check()) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return why

    async def _post_once(self, body: dict[str, Any], prefer: str | None = None) -> tuple[dict[str, Any], float, str]:
        http, cond = self._bind_loop()
        endpoint = await self._acquire(cond, prefer)
        if why := await self._server_exit(endpoint, 0.0):
            await self._release(cond, endpoint, False)
            raise LLMServerExited(why)
        shard = min(range(len(self._shards)), key=self._shard_busy.__getitem__)  # always has a free connection
        http = self._shards[shard]
        self._shard_busy[shard] += 1
        url = f"{endpoint}/chat/completions"
        down = False
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                resp = await http.post(url, json=body)
                text = resp.text  # post() has read the whole body
        except TimeoutError:
            raise LLMTimeoutError(f"no complete reply from {url} within {self.timeout}s") from None
        except httpx.TimeoutException as e:
            raise LLMTimeoutError(f"{type(e).__name__} from {url} (timeout {self.timeout}s)") from None
        except httpx.TransportError as e:
            down = True
            if why := await self._server_exit(endpoint, 2.0):
                raise LLMServerExited(why) from None
            raise LLMTransportError(f"{type(e).__name__} talking to {url}: {e}") from None
        finally:
            self._shard_busy[shard] -= 1
            await self._release(cond, endpoint, down)
        latency = time.perf_counter() - t0
        if resp.status_code >= 400:
            raise LLMHTTPError(resp.status_code, text, url)
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise LLMFormatError(f"response from {url} is not JSON (or nests too deeply to read)", text) from None
        if not isinstance(data, dict):
            raise LLMFormatError(f"response from {url} is not a JSON object", text)
        return data, latency, endpoint

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per stage: requests, cache_hits, server_calls, retries, errors, format_errors,
        prompt/completion tokens (server calls only), latency sum and median of server calls."""
        return {stage: s.as_dict() for stage, s in sorted(self._stats.items())}

    async def aclose(self) -> None:
        if self._http is not None:
            for h in self._shards:
                try:
                    await h.aclose()
                except RuntimeError:  # created on another, already closed loop
                    pass
            self._http = None
            self._shards = []
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    async def __aenter__(self) -> "LLMClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
