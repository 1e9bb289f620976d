"""The Environment API: an episode over a domain, its tools run in the sandboxed worker.

    env = Environment.open(domain_dir)           # starts the worker; refuses without isolation unless unsafe
    obs = env.reset()                            # fresh in-memory copy of the seed (about a millisecond)
    res = env.call("get_user", {"user_id": "u1"})  # ToolResult(ok, content, error)
    env.state_hash(); env.diff(); env.close()

Arguments are validated here (in the parent, compiled validators cached) before anything reaches the
worker. If the worker hangs or dies, it is killed and restarted, the episode's state is rebuilt by
replaying the episode's successful writes (tools are deterministic: fixed clock, deterministic ids),
and the caller gets a tool error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentscaler.schemas import check
from envs.fastcheck import flat_checker
from envs.sandbox import SandboxError, WorkerCrashed, WorkerProcess
from envs.spec import DomainSpec

__all__ = ["Environment", "ToolResult", "SandboxError"]

STATE_TIMEOUT = 120.0  # reset / hash / diff / snapshot on big databases


class ToolResult:
    """One tool call's result. A sandboxed call's content arrives as the JSON text an agent sees
    (`text()` returns it as is); it is parsed only when `content` is read."""

    __slots__ = ("ok", "_content", "_raw", "error")

    def __init__(self, ok: bool, content: Any = None, error: str | None = None, *, raw: bytes | None = None):
        self.ok, self._content, self.error, self._raw = ok, content, error, raw

    @property
    def content(self) -> Any:
        if self._raw is not None:
            self._content, self._raw = json.loads(self._raw), None
        return self._content

    def text(self) -> str:
        """What an agent sees in the tool message."""
        if not self.ok:
            return f"Error: {self.error}"
        if self._raw is not None and not self._raw.startswith(b'"'):  # a JSON string is shown unquoted
            return self._raw.decode("utf-8", "surrogatepass")
        c = self.content
        return c if isinstance(c, str) else json.dumps(c, ensure_ascii=False, default=str)

    def model_dump(self) -> dict[str, Any]:
        return {"ok": self.ok, "content": self.content, "error": self.error}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolResult):
            return NotImplemented
        return (self.ok, self.content, self.error) == (other.ok, other.content, other.error)

    def __repr__(self) -> str:
        return f"ToolResult(ok={self.ok!r}, content={self.content!r}, error={self.error!r})"


class Environment:
    """One domain's environment. Not thread-safe: use one per concurrent episode."""

    def __init__(self, domain_dir: Path, spec: DomainSpec, worker: WorkerProcess):
        self.domain_dir = Path(domain_dir)
        self.spec = spec
        self.worker = worker
        self._kinds = {t.name: t.kind for t in spec.tools}
        self._checks = {t.name: check(t.parameters) for t in spec.tools}  # agentscaler.schemas: one validator
        self._fast: dict[str, Any] = {}  # flat schemas: a checker that agrees with jsonschema, 10x faster
        for t in spec.tools:
            fast = flat_checker(t.parameters) if self._checks[t.name].problem is None else None
            if fast is not None:
                self._fast[t.name] = fast
        self._writes: list[tuple[str, dict[str, Any]]] = []  # successful writes since reset (replay log)
        self._base: bytes | None = None  # restored snapshot the episode started from (None = seed)
        self.scenario: Any = None
        self.closed = False

    # life cycle ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, domain_dir: Path | str, *, unsafe: bool = False, time_limit: float = 2.0,
             memory_mb: int = 1024, max_reply: int = 4 << 20, check_code: bool = True,
             spin_us: int | None = None) -> "Environment":
        """Start the sandboxed worker for domain_dir. Raises SandboxError when isolation is missing
        (unless unsafe) or, with check_code, when tools.py fails to load. spin_us: how long caller
        and worker busy-wait for each other before sleeping (default: envs.sandbox.default_spin_us)."""
        domain_dir = Path(domain_dir)
        try:
            spec = DomainSpec.load(domain_dir)
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise SandboxError(f"{domain_dir}: cannot read spec.json: {exc}") from None
        worker = WorkerProcess(domain_dir, unsafe=unsafe, time_limit=time_limit, memory_mb=memory_mb,
                               max_reply=max_reply, spin_us=spin_us)
        worker.start()
        if check_code and worker.load_error:
            worker.close()
            raise SandboxError(f"{domain_dir}: {worker.load_error}")
        return cls(domain_dir, spec, worker)

    @property
    def isolation(self) -> dict[str, bool]:
        return dict(self.worker.isolation)

    @property
    def restarts(self) -> int:
        return self.worker.restarts

    @property
    def missing_tools(self) -> list[str]:
        """Tools of the spec that tools.py does not define."""
        return list(self.worker.missing)

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas of the domain."""
        return [t.openai_schema() for t in self.spec.tools]

    def reset(self, scenario: Any = None) -> dict[str, Any]:
        """Fresh copy of the seed. Returns the observation: domain, tools, and the scenario's
        public fields (intent, user facts) when one is given."""
        self._state_op({"op": "reset"})
        self._writes.clear()
        self._base = None
        self.scenario = scenario
        obs: dict[str, Any] = {"domain": self.spec.id, "tools": self.tools()}
        if scenario is not None:
            sc = scenario.model_dump() if hasattr(scenario, "model_dump") else dict(scenario)
            obs.update({"scenario_id": sc.get("id"), "intent": sc.get("intent"),
                        "user_facts": sc.get("user_facts", {})})
        return obs

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.worker.close()

    def __enter__(self) -> "Environment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # tool calls ---------------------------------------------------------------------------------
    def _check(self, name: Any, arguments: Any) -> tuple[str | None, dict[str, Any] | ToolResult]:
        if not isinstance(name, str) or name not in self._kinds:
            return None, ToolResult(False, None, f"unknown tool {name!r}; available tools: "
                                                 f"{', '.join(sorted(self._kinds))}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                return None, ToolResult(False, None, f"arguments of {name} are not valid JSON: {exc}")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return None, ToolResult(False, None, f"arguments of {name} must be a JSON object, "
                                                 f"got {type(arguments).__name__}")
        fast = self._fast.get(name)
        if fast is not None and fast(arguments):
            return name, arguments
        schema = self._checks[name]
        err = schema.first_error(arguments)
        if schema.problem is not None:
            return None, ToolResult(False, None, f"tool {name} has an invalid parameter schema: {schema.problem}")
        if err is not None:
            where, message = err
            return None, ToolResult(False, None, f"invalid arguments for {name}"
                                                 f"{' at ' + where if where else ''}: {message}")
        return name, arguments

    def call(self, name: str, arguments: dict[str, Any] | str | None = None) -> ToolResult:
        """Run one tool. Never raises for bad input or misbehaving tool code: returns ok=False."""
        if self.closed:
            raise SandboxError("environment is closed")
        name_ok, args = self._check(name, arguments)
        if name_ok is None:
            return args  # type: ignore[return-value]
        kind = self._kinds[name]
        try:
            reply, payload = self.worker.request({"op": "call", "name": name, "args": args, "kind": kind})
        except (TypeError, ValueError) as exc:  # raised while encoding, before anything was sent
            return ToolResult(False, None, f"arguments of {name} are not JSON-serializable: {exc}")
        except WorkerCrashed as exc:
            self._recover()
            return ToolResult(False, None, f"tool {name} {exc}; the sandbox was restarted")
        if reply.get("ok") is True:
            if kind == "write":
                self._writes.append((name, args))
            return ToolResult(True, None, None, raw=payload)
        return ToolResult(False, None, str(reply.get("error") or "tool error"))

    def step(self, tool_call: Any) -> ToolResult:
        """call() taking one tool call: {"name", "arguments"}, the OpenAI {"function": {...}} shape,
        or an object with .name/.arguments."""
        if hasattr(tool_call, "name") and hasattr(tool_call, "arguments"):
            return self.call(tool_call.name, tool_call.arguments)
        if not isinstance(tool_call, dict):
            return ToolResult(False, None, f"a tool call must be an object with name and arguments, got "
                                           f"{type(tool_call).__name__}")
        fn = tool_call.get("function", tool_call)
        return self.call(fn.get("name"), fn.get("arguments"))

    def call_batch(self, calls: list[Any]) -> list[ToolResult]:
        """Many calls in one pipe round trip (gold execution). Same results as calling one by one."""
        results: list[ToolResult | None] = [None] * len(calls)
        send: list[tuple[int, str, dict[str, Any]]] = []
        for i, c in enumerate(calls):
            if hasattr(c, "name") and hasattr(c, "arguments"):
                name, args = c.name, c.arguments
            elif isinstance(c, dict):
                fn = c.get("function", c)
                name, args = fn.get("name"), fn.get("arguments")
            else:
                name, args = c
            n, a = self._check(name, args)
            if n is None:
                results[i] = a  # type: ignore[assignment]
            else:
                send.append((i, n, a))  # type: ignore[arg-type]
        if send:
            try:
                reply, _ = self.worker.request(
                    {"op": "batch", "calls": [[n, a, self._kinds[n]] for _, n, a in send]},
                    timeout=self.worker.time_limit * len(send) + self.worker.grace)
                if not isinstance(reply.get("results"), list) or len(reply["results"]) != len(send):
                    raise ValueError("batch reply does not match the request")
                for (i, n, a), r in zip(send, reply["results"]):
                    if r.get("ok") is True:
                        if self._kinds[n] == "write":
                            self._writes.append((n, a))
                        results[i] = ToolResult(True, r.get("content"), None)
                    else:
                        results[i] = ToolResult(False, None, str(r.get("error") or "tool error"))
            except WorkerCrashed:
                # Rebuild the state before the batch, then run the calls one by one to attribute the crash.
                self._recover()
                for i, n, a in send:
                    results[i] = self.call(n, a)
            except (KeyError, TypeError, ValueError, AttributeError):
                # unencodable arguments, or a reply that is not a batch reply: one by one instead
                self.worker.kill()
                self._recover()
                for i, n, a in send:
                    results[i] = self.call(n, a)
        return results  # type: ignore[return-value]

    # state --------------------------------------------------------------------------------------
    def _state_op(self, req: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        for attempt in range(2):
            try:
                reply, out = self.worker.request(req, payload, timeout=STATE_TIMEOUT)
            except WorkerCrashed as exc:
                if attempt:
                    raise SandboxError(f"sandbox worker failed during {req['op']}: {exc}") from None
                self._recover()
                continue
            if reply.get("ok") is not True:
                raise SandboxError(f"{req['op']} failed: {reply.get('error')}")
            return reply, out
        raise AssertionError("unreachable")

    def state_hash(self) -> str:
        """Canonical hash of the episode's state (column policies applied)."""
        return self._state_op({"op": "hash"})[0]["hash"]

    def diff(self, against: bytes | None = None) -> list[dict[str, Any]]:
        """Field-level diff from `against` (a snapshot(); default: the seed) to the current state."""
        return self._state_op({"op": "diff"}, against or b"")[0]["diff"]

    def snapshot(self) -> bytes:
        """The episode's database image (restore() it later, or diff(against=...))."""
        return self._state_op({"op": "snapshot"})[1]

    def restore(self, snapshot: bytes) -> None:
        """Continue the episode from a snapshot() (the replay log restarts from there)."""
        self._state_op({"op": "reset"}, snapshot)
        self._writes.clear()
        self._base = bytes(snapshot)

    # recovery -----------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Restart the worker and rebuild the episode state: base image + replay of the writes."""
        self.worker.restarts += 1
        self.worker.start()
        try:
            self.worker.request({"op": "reset"}, self._base or b"", timeout=STATE_TIMEOUT)
            if self._writes:
                self.worker.request({"op": "batch", "calls": [[n, a, "write"] for n, a in self._writes]},
                                    timeout=self.worker.time_limit * len(self._writes) + STATE_TIMEOUT)
        except WorkerCrashed:
            self.worker.start()
            self._writes.clear()
            self._base = None
