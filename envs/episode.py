"""The Environment API: an episode over a domain, its tools run in the sandboxed worker.

    env = Environment.open(domain_dir)           # starts the worker; refuses without isolation unless unsafe
    obs = env.reset()                            # fresh in-memory copy of the seed (about a millisecond)
    res = env.call("get_user", {"user_id": "u1"})  # ToolResult(ok, content, error)
    env.state_hash(); env.diff(); env.close()

Arguments are validated here (in the parent, compiled validators cached) before anything reaches the
worker. Each episode runs in a fresh sandbox child once tool code has run (reset and restore ask the
worker's zygote for one), so nothing a tool did in one episode reaches the next. The state hash and
diff are computed here (envs.state.StateOracle) from the database image the worker sends, never by
code tool code could change. If the worker hangs or dies, its child is replaced, the episode's
state is rebuilt by replaying the episode's successful writes (tools are deterministic: fixed clock,
deterministic ids), and the caller gets a tool error; a rebuild that does not reproduce the episode
(a replayed write fails or answers differently, or the state before the crash is known here and
the rebuilt one differs) fails the episode: calls return errors and state_hash()/diff() raise
SandboxError until the next reset.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentscaler.schemas import check, value_problem
from agentscaler.workspace import atomic_write_json
from envs import store
from envs.fastcheck import flat_checker
from envs.hosted import EpisodeSlot, HostedWorker, SlotLost
from envs.sandbox import RequestTooLarge, SandboxError, WorkerCrashed, WorkerProcess, decode_reply
from envs.spec import DomainSpec
from envs.state import StateOracle

__all__ = ["Environment", "ToolResult", "SandboxError"]

STATE_TIMEOUT = 120.0  # reset / restore / snapshot on big databases
# Beside seed.sqlite: the state oracle's seed digests and pages (StateOracle.stored()), written when
# the domain's scenarios are built; used only when its key matches the seed and tables read now.
ORACLE_FILE = "state_oracle.json"
_SEED = object()  # Environment._image: the state is the seed


def _unpack(call: Any, pairs: bool = False) -> tuple[Any, Any] | ToolResult:
    """(name, arguments) of one tool call: an object with .name/.arguments, {"name", "arguments"},
    the OpenAI {"function": {...}} shape, or (with pairs) a (name, arguments) pair; else a tool error."""
    if hasattr(call, "name") and hasattr(call, "arguments"):
        return call.name, call.arguments
    fn = call.get("function", call) if isinstance(call, dict) else None
    if isinstance(fn, dict):
        return fn.get("name"), fn.get("arguments")
    if pairs and isinstance(call, (tuple, list)) and len(call) == 2:
        return call[0], call[1]
    shown = type(fn if isinstance(call, dict) else call).__name__
    return ToolResult(False, None, f"a tool call must be an object with name and arguments, got {shown}")


class Checked(tuple):
    """A (name, arguments) pair whose arguments the caller already found valid with this domain's
    own checks (the tool's agentscaler.schemas.check, value_problem first, as _check runs them):
    call_batch/replay take it without checking again. For callers that run those checks anyway
    (the verifier's static checks); anything else is checked here."""

    __slots__ = ()


def _same_output(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


class ToolResult:
    """One tool call's result. A sandboxed call's content arrives as the JSON text an agent sees
    (`text()` returns it as is); it is parsed only when `content` is read."""

    __slots__ = ("ok", "_content", "_raw", "error")

    def __init__(self, ok: bool, content: Any = None, error: str | None = None, *, raw: bytes | None = None):
        self.ok, self._content, self.error, self._raw = ok, content, error, raw

    @property
    def content(self) -> Any:
        if self._raw is not None:
            self._content, self._raw = decode_reply(self._raw), None
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


def _start_worker(domain_dir: Path, *, unsafe: bool = False, time_limit: float = 2.0, memory_mb: int = 1024,
                  max_reply: int = 4 << 20, check_code: bool = True, spin_us: int | None = None,
                  scratch_mb: int = 32, cpu: int | str | None = None) -> tuple[DomainSpec, WorkerProcess]:
    """The domain's spec and its started sandbox worker (Environment.open documents the arguments)."""
    try:
        spec = DomainSpec.load(domain_dir)
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise SandboxError(f"{domain_dir}: cannot read spec.json: {exc}") from None
    worker = WorkerProcess(domain_dir, unsafe=unsafe, time_limit=time_limit, memory_mb=memory_mb,
                           max_reply=max_reply, spin_us=spin_us, scratch_mb=scratch_mb, cpu=cpu)
    worker.start()
    if check_code and worker.load_error:
        worker.close()
        raise SandboxError(f"{domain_dir}: {worker.load_error}")
    return spec, worker


def read_state_oracle(domain_dir: Path) -> Any:
    """The ORACLE_FILE beside a domain's seed, as stored (StateOracle checks its key), or None."""
    try:
        return json.loads((Path(domain_dir) / ORACLE_FILE).read_bytes())
    except (OSError, ValueError):
        return None


def write_state_oracle(domain_dir: Path | str, oracle: StateOracle | None = None) -> bool:
    """Keep the state oracle's seed digests and pages beside the domain's seed (ORACLE_FILE), so
    that a later opening of the domain (a verifier's) takes them instead of computing them. No
    tool code runs (the oracle reads the seed here). `oracle`: the domain's, already open (a
    build's Environment.state_oracle(), opened the way this one would be): its seed digests are
    kept rather than computed again. True when written, False when the one there is already for
    this seed and these tables."""
    domain_dir = Path(domain_dir)
    own = oracle is None
    if oracle is None:
        spec = DomainSpec.load(domain_dir)
        oracle = StateOracle(spec.tables, store.load_seed_bytes(domain_dir / spec.seed_path),
                             read_state_oracle(domain_dir))
    try:
        if oracle.from_store:
            return False
        atomic_write_json(domain_dir / ORACLE_FILE, oracle.stored())
        return True
    finally:
        if own:
            oracle.close()


class Environment:
    """One domain's environment. Not thread-safe: use one per concurrent episode."""

    def __init__(self, domain_dir: Path, spec: DomainSpec, worker: WorkerProcess | EpisodeSlot):
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
        # successful writes since reset (the replay log): name, arguments, output (JSON text or value)
        self._writes: list[tuple[str, dict[str, Any], Any]] = []
        self._base: bytes | None = None  # restored snapshot the episode started from (None = seed)
        self._image: Any = _SEED  # the state's database image when known here (None: ask the worker)
        self._seed: bytes | None = None
        self._oracle: StateOracle | None = None
        self._failed: str | None = None  # why the episode's state was lost (until the next reset)
        self._restart = False  # restart() asked for: the next request restarts the child's episode first
        self.scenario: Any = None
        self.closed = False

    # life cycle ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, domain_dir: Path | str, *, unsafe: bool = False, time_limit: float = 2.0,
             memory_mb: int = 1024, max_reply: int = 4 << 20, check_code: bool = True,
             spin_us: int | None = None, scratch_mb: int = 32, cpu: int | str | None = None) -> "Environment":
        """Start the sandboxed worker for domain_dir. Raises SandboxError when isolation is missing
        (unless unsafe) or, with check_code, when tools.py fails to load. spin_us: how long caller
        and worker busy-wait for each other before sleeping (default: envs.sandbox.default_spin_us).
        cpu: run the worker on that CPU only; a caller thread pinned there too gets its replies
        without a CPU waking up (envs.sandbox's Transport note; for call loops without spinning).
        cpu="caller": the same, k being the CPU the calling thread is on at its first call. Either
        way the caller's thread stays free: a call that finds it on another CPU holds it on k for
        that round trip only (no busy-wait; envs.sandbox's Transport note).
        memory_mb: each worker process's budget, scratch_mb of it the scratch tmpfs. The worker dies
        with the thread that opened it (its parent-death signal is per thread): open on a thread
        that outlives the environment."""
        domain_dir = Path(domain_dir)
        return cls(domain_dir, *_start_worker(domain_dir, unsafe=unsafe, time_limit=time_limit, memory_mb=memory_mb,
                                              max_reply=max_reply, check_code=check_code, spin_us=spin_us,
                                              scratch_mb=scratch_mb, cpu=cpu))

    @classmethod
    def open_hosted(cls, domain_dir: Path | str, episodes: int, **kw: Any) -> list["Environment"]:
        """`episodes` Environments of one domain served by ONE sandbox worker (envs.hosted): each
        its own seed copy, connection and tools.py namespace in the worker's child, taking turns
        on its pipe. For many live episodes (RL) at a fraction of the processes and memory of one
        worker each; the trade (one interpreter per worker) is in envs.hosted. Takes open()'s
        keyword arguments."""
        domain_dir = Path(domain_dir)
        spec, worker = _start_worker(domain_dir, **kw)
        host = HostedWorker(worker)
        try:
            return [cls(domain_dir, spec, host.new_slot()) for _ in range(episodes)]
        except (WorkerCrashed, SandboxError) as exc:
            worker.close()
            raise SandboxError(f"{domain_dir}: could not open hosted episodes: {exc}") from None

    def moved(self, domain_dir: Path | str) -> None:
        """The domain's files now live in `domain_dir`, moved there unchanged (a build validates
        an environment in a staging folder, moves it into place, then builds its scenarios on the
        same worker). The running worker needs none of them (code compiled, seed loaded, files
        bind-mounted by inode); a restarted worker starts from the new folder."""
        proc = self.worker if isinstance(self.worker, WorkerProcess) else self.worker.host.worker
        self.domain_dir = Path(domain_dir)
        proc.domain_dir = self.domain_dir.resolve()

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
        """Fresh copy of the seed, in a fresh sandbox child once tool code has run. Returns the
        observation: domain, tools, and the scenario's public fields (intent, user facts) when one
        is given."""
        self._begin(None)
        self.scenario = scenario
        obs: dict[str, Any] = {"domain": self.spec.id, "tools": self.tools()}
        if scenario is not None:
            sc = scenario.model_dump() if hasattr(scenario, "model_dump") else dict(scenario)
            obs.update({"scenario_id": sc.get("id"), "intent": sc.get("intent"),
                        "user_facts": sc.get("user_facts", {})})
        return obs

    def restart(self) -> None:
        """A new episode from the seed in the current sandbox child, without forking a new one (gold
        execution's walks, one after another): the worker opens a new connection holding the seed
        and a new db helper, runs tools.py afresh in a new module namespace and empties the scratch
        mount (envs.worker.Worker.restart), so neither the state nor tool code's module globals nor
        the files of the last episode reach this one. No round trip of its own: it goes with the
        next request. Unlike reset(), what tool code changes outside its own module (a stdlib module
        it patches, which statically checked tool code cannot do) stays for the next episode:
        reset() is the fresh process. Hosted episodes reset()."""
        if self.closed:
            raise SandboxError("environment is closed")
        if not isinstance(self.worker, WorkerProcess):
            self.reset()
            return
        self._restart = True
        self._writes.clear()
        self._base = None
        self._image = _SEED
        self._failed = None
        self.scenario = None

    def _request(self, obj: dict[str, Any], payload: bytes = b"", timeout: float | None = None) -> tuple[dict, bytes]:
        """worker.request, carrying a pending restart() (done by the worker before the operation)."""
        if self._restart:
            obj = {**obj, "restart": True}
        try:
            got = self.worker.request(obj, payload, timeout)
        except WorkerCrashed:
            self._restart = False  # the worker holds a fresh child: the seed, nothing of tool code
            raise
        self._restart = False
        return got

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.worker.close()
            if self._oracle is not None:
                self._oracle.close()

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
            except RecursionError:
                return None, ToolResult(False, None, f"arguments of {name} nest too deeply to read")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return None, ToolResult(False, None, f"arguments of {name} must be a JSON object, "
                                                 f"got {type(arguments).__name__}")
        problem = value_problem(arguments)  # before any check: every check may recurse into the value
        if problem is not None:
            return None, ToolResult(False, None, f"invalid arguments for {name}: {problem}")
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

    def call(self, name: str, arguments: dict[str, Any] | str | None = None, *, snapshot: bool = False) -> ToolResult:
        """Run one tool. Never raises for bad input or misbehaving tool code: returns ok=False.
        snapshot: the reply to a successful write also carries the database image after it, so
        state_hash(), diff() and snapshot() then need no round trip of their own (gold execution)."""
        if self.closed:
            raise SandboxError("environment is closed")
        name_ok, args = self._check(name, arguments)
        if name_ok is None:
            return args  # type: ignore[return-value]
        if self._failed:
            return ToolResult(False, None, self._lost())
        kind = self._kinds[name]
        before, self._image = self._image, None  # tool code runs: the state is the worker's to tell
        try:
            image = snapshot and kind == "write"
            reply, payload = self._request({"op": "call", "name": name, "args": args, "kind": kind, "image": image}
                                           if image else {"op": "call", "name": name, "args": args, "kind": kind})
        except RequestTooLarge as exc:  # nothing was sent
            self._image = before
            return ToolResult(False, None, f"arguments of {name} are too large: {exc}")
        except (TypeError, ValueError, RecursionError) as exc:  # raised while encoding, before anything was sent
            self._image = before
            return ToolResult(False, None, f"arguments of {name} are not JSON-serializable: {exc}")
        except WorkerCrashed as exc:
            self._recover(before)
            if isinstance(exc, SlotLost) and not self._failed:  # nothing ran: the episode is rebuilt, go on
                return self.call(name, args)
            return ToolResult(False, None, f"tool {name} {exc}; the sandbox was restarted")
        if reply.get("ok") is True:
            if image:  # the text, then the database image after the write
                n = reply.get("text")
                if type(n) is not int or not 0 <= n <= len(payload):
                    self.worker.restarts += 1
                    self._fresh()
                    self._recover(before)
                    return ToolResult(False, None, f"tool {name} broke the worker protocol; the sandbox was restarted")
                payload, self._image = payload[:n], payload[n:]
            if kind == "write":
                self._writes.append((name, args, payload))
            return ToolResult(True, None, None, raw=payload)
        return ToolResult(False, None, str(reply.get("error") or "tool error"))

    def call_from_seed(self, name: str, arguments: dict[str, Any] | str | None = None) -> tuple[ToolResult, bytes]:
        """One call in an episode of its own from the seed, in one round trip: (call()'s result, the
        database image after it). Runs in the current sandbox child with tools.py run afresh, as
        replay() runs an episode, so no fresh child is forked per call (a child that crashes or hangs
        is replaced, the call gets call()'s error, and the image is the seed's). The validation
        suite's try. The environment's own episode is over: reset() before call()."""
        if self.closed:
            raise SandboxError("environment is closed")
        n, a = self._check(name, arguments)
        if n is None:
            return a, self._seed_bytes()  # type: ignore[return-value]
        self._failed = "the environment ran calls from the seed since the last reset"
        self._image = None
        try:
            reply, payload = self._request({"op": "episodes", "episodes": [[[n, a, self._kinds[n]]]],
                                                  "images": True},
                                                 timeout=self.worker.time_limit + self.worker.grace + 10.0)
        except RequestTooLarge as exc:
            return ToolResult(False, None, f"arguments of {n} are too large: {exc}"), self._seed_bytes()
        except (TypeError, ValueError, RecursionError) as exc:
            return ToolResult(False, None, f"arguments of {n} are not JSON-serializable: {exc}"), self._seed_bytes()
        except WorkerCrashed as exc:  # the worker holds a fresh child: nothing of the call remains
            return ToolResult(False, None, f"tool {n} {exc}; the sandbox was restarted"), self._seed_bytes()
        try:
            (((ok, val),), size), = reply["episodes"]
            if ok is True and isinstance(val, int) and len(payload) == val + size:
                return ToolResult(True, None, None, raw=payload[:val]), payload[val:]
            if ok is not True and len(payload) == size:
                return ToolResult(False, None, str(val or "tool error")), payload
        except (KeyError, TypeError, ValueError, AttributeError):  # not an episodes reply
            pass
        self.worker.restarts += 1
        self._fresh()
        return ToolResult(False, None, f"tool {n} broke the worker protocol; the sandbox was restarted"), \
            self._seed_bytes()

    @staticmethod
    def call_many(calls: list[tuple["Environment", str, dict[str, Any] | str | None]]) -> list[ToolResult]:
        """A vectorized step: (environment, tool, arguments) of many episodes -> their results, in
        the order given, each what env.call(tool, arguments) returns. The hosted episodes' calls go
        as one message per worker (envs.hosted), sent to every worker before any reply is read: one
        round trip serves all the episodes of a worker, and the workers run at once. The calls of
        one episode run in their order. A worker that crashes mid-step costs only its own episodes:
        its calls are redone one by one (each episode rebuilt from its writes; the call that crashes
        the child again gets the error). Episodes with a worker of their own run one by one."""
        results: list[ToolResult | None] = [None] * len(calls)
        by_host: dict[HostedWorker, list[tuple[int, Environment, str, dict[str, Any]]]] = {}
        one_by_one: list[tuple[int, Environment, str, dict[str, Any]]] = []
        for i, (env, name, arguments) in enumerate(calls):
            if env.closed:
                raise SandboxError("environment is closed")
            n, a = env._check(name, arguments)
            if n is None:
                results[i] = a
            elif env._failed:
                results[i] = ToolResult(False, None, env._lost())
            elif isinstance(env.worker, EpisodeSlot):
                by_host.setdefault(env.worker.host, []).append((i, env, n, a))
            else:
                one_by_one.append((i, env, n, a))
        before: dict[int, Any] = {}  # id(env) -> its state before the step (for a rebuild after a crash)
        sent, held = [], []
        try:
            for host in sorted(by_host, key=lambda h: h.order):  # one order of locks: no deadlock
                host.lock.acquire()
                held.append(host)
                group = [c for c in by_host[host] if c[1].worker.current]
                one_by_one += [c for c in by_host[host] if not c[1].worker.current]  # lost: rebuilt by call()
                if not group:
                    continue
                for _, env, _, _ in group:
                    before.setdefault(id(env), env._image)
                    env._image = None  # tool code runs: the state is the worker's to tell
                try:
                    pending = host.send_many([(env.worker, n, a, env._kinds[n]) for _, env, n, a in group])
                except (WorkerCrashed, RequestTooLarge, TypeError, ValueError, RecursionError):
                    one_by_one += group  # nothing ran, or the child is new: one by one says which call
                    continue
                sent.append((host, group, pending))
            for host, group, pending in sent:
                try:
                    got = host.finish_many(pending, len(group))
                except WorkerCrashed:
                    one_by_one += group
                    continue
                for (i, env, n, a), (ok, val) in zip(group, got):
                    if ok:
                        if env._kinds[n] == "write":
                            env._writes.append((n, a, val))
                        results[i] = ToolResult(True, None, None, raw=val)  # type: ignore[arg-type]
                    else:
                        results[i] = ToolResult(False, None, val)  # type: ignore[arg-type]
        finally:
            for host in held:
                host.lock.release()
        for i, env, n, a in sorted(one_by_one, key=lambda c: c[0]):
            if id(env) in before:
                env._image = before.pop(id(env))  # the state before the step: call() rebuilds from it
            results[i] = env.call(n, a)
        return results  # type: ignore[return-value]

    def step(self, tool_call: Any) -> ToolResult:
        """call() taking one tool call: {"name", "arguments"}, the OpenAI {"function": {...}} shape,
        or an object with .name/.arguments."""
        got = _unpack(tool_call)
        return got if isinstance(got, ToolResult) else self.call(*got)

    def _prepared(self, call: Any) -> tuple[str, Any] | ToolResult:
        """(name, checked arguments) of one call as call_batch/replay take it, or its error result."""
        if type(call) is Checked and call[0] in self._kinds and isinstance(call[1], dict):
            return call[0], call[1]
        got = _unpack(call, pairs=True)
        if isinstance(got, ToolResult):
            return got
        n, a = self._check(*got)
        return a if n is None else (n, a)

    def call_batch(self, calls: list[Any]) -> list[ToolResult]:
        """Many calls in one pipe round trip (gold execution). Same results as calling one by one."""
        results: list[ToolResult | None] = [None] * len(calls)
        send: list[tuple[int, str, dict[str, Any]]] = []
        for i, c in enumerate(calls):
            got = self._prepared(c)
            if isinstance(got, ToolResult):
                results[i] = got
            else:
                send.append((i, *got))
        if send and self._failed:
            for i, _, _ in send:
                results[i] = ToolResult(False, None, self._lost())
            send = []
        if send:
            before, self._image = self._image, None
            try:
                reply, _ = self._request(
                    {"op": "batch", "calls": [[n, a, self._kinds[n]] for _, n, a in send]},
                    timeout=self.worker.time_limit * len(send) + self.worker.grace)
                if not isinstance(reply.get("results"), list) or len(reply["results"]) != len(send):
                    raise ValueError("batch reply does not match the request")
                for (i, n, a), r in zip(send, reply["results"]):
                    if r.get("ok") is True:
                        if self._kinds[n] == "write":
                            self._writes.append((n, a, r.get("content")))
                        results[i] = ToolResult(True, r.get("content"), None)
                    else:
                        results[i] = ToolResult(False, None, str(r.get("error") or "tool error"))
            except WorkerCrashed:
                # Rebuild the state before the batch, then run the calls one by one to attribute the crash.
                self._recover(before)
                for i, n, a in send:
                    results[i] = self.call(n, a)
            except (KeyError, TypeError, ValueError, AttributeError):
                # unencodable arguments, or a reply that is not a batch reply: one by one instead
                self.worker.restarts += 1
                self._fresh()
                self._recover(before)
                for i, n, a in send:
                    results[i] = self.call(n, a)
        return results  # type: ignore[return-value]

    def replay(self, episodes: list[list[Any]], fresh: bool = False, max_bytes: int = 64 << 20,
               images: bool = False) -> Iterator[tuple[list[ToolResult], bytes | None]]:
        """Each episode's calls (as for call_batch) from the seed: [(results, image)], the image
        None when the episode committed no write (reads and failed calls are rolled back, so it
        ended at the seed). Results are call()'s, text for text. images=True: every episode's image,
        also of those that committed nothing (a caller that re-measures that reads left the seed:
        the scenario stage's determinism replay).

        Verification's replay. By default many episodes share one sandbox child and one round trip
        (up to 256, or max_bytes of images), each starting from the seed with tools.py run afresh
        and scratch emptied, so there is no fork per episode; what tool code changes outside its
        own module and files (a module it patches) would reach later episodes of the same round trip.
        fresh=True gives each episode a fresh child and runs its calls one by one, as a rollout
        did. A round trip the child does not survive is redone that way. Results come
        one round trip at a time, as they are iterated. The environment's own episode is over
        once this starts: reset() before call()."""
        self._failed = "the environment replayed other episodes since the last reset"
        per = max(1, min(256, max_bytes // max(len(self._seed_bytes()), 1)))
        for lo in range(0, len(episodes), per):
            chunk = [[self._prepared(c) for c in calls] for calls in episodes[lo:lo + per]]
            got = None if fresh else self._replay_shared(chunk, images)
            if got is None:
                got = [self._replay_fresh(ep, images) for ep in chunk]
                self._failed = "the environment replayed other episodes since the last reset"
            yield from got

    def _replay_shared(self, episodes: list[list[tuple[str, Any] | ToolResult]], images: bool = False
                       ) -> list[tuple[list[ToolResult], bytes | None]] | None:
        """One round trip for many episodes in the current child; None if the child did not survive it."""
        sends = [[[c[0], c[1], self._kinds[c[0]]] for c in ep if not isinstance(c, ToolResult)] for ep in episodes]
        n_calls = sum(len(s) for s in sends)
        self._image = None
        try:
            reply, payload = self._request({"op": "episodes", "episodes": sends, "images": images},
                                                 timeout=self.worker.time_limit * n_calls + STATE_TIMEOUT)
            eps = reply.get("episodes")
            if not isinstance(eps, list) or len(eps) != len(episodes):
                raise ValueError("episodes reply does not match the request")
            out, at = [], 0
            for ep, (results, size) in zip(episodes, eps):
                it = iter(results)
                res: list[ToolResult] = []
                for c in ep:
                    if isinstance(c, ToolResult):
                        res.append(c)
                        continue
                    ok, val = next(it)
                    if ok is True:
                        res.append(ToolResult(True, None, None, raw=payload[at:at + val]))
                        at += val
                    else:
                        res.append(ToolResult(False, None, str(val or "tool error")))
                image = None
                if size >= 0:
                    image, at = payload[at:at + size], at + size
                out.append((res, image))
            if at != len(payload):
                raise ValueError("episodes reply does not match its payload")
            return out
        except WorkerCrashed:  # the worker already holds a fresh child
            return None
        except (KeyError, TypeError, ValueError, AttributeError, StopIteration, RequestTooLarge):
            self.worker.restarts += 1
            self._fresh()
            return None

    def _replay_fresh(self, episode: list[tuple[str, Any] | ToolResult],
                      images: bool = False) -> tuple[list[ToolResult], bytes | None]:
        """One episode in a fresh child, call by call as a rollout runs it (the text of each result
        is the worker's own, not re-encoded)."""
        self.reset()
        results = [c if isinstance(c, ToolResult) else self.call(*c) for c in episode]
        wrote = any(r.ok and self._kinds[c[0]] == "write" for c, r in zip(episode, results)
                    if not isinstance(c, ToolResult))
        return results, (self.snapshot() if wrote or images else None)

    # state --------------------------------------------------------------------------------------
    def _fresh(self) -> None:
        try:
            self.worker.fresh()
        except WorkerCrashed as exc:
            raise SandboxError(f"sandbox worker for {self.domain_dir} {exc}") from None

    def _begin(self, base: bytes | None) -> None:
        """Start an episode from the seed (base None) or a snapshot: a fresh child if tool code ran."""
        self._restart = False  # a fresh child, or one no tool code ran in: no restart needed
        for attempt in range(2):
            fresh = self.worker.tainted  # (after a crash the worker already holds a new child)
            if fresh:
                self._fresh()
            if base is None and (fresh or self._image is _SEED):
                break  # a fresh or untouched child already holds the seed
            try:
                reply, _ = self.worker.request({"op": "reset"}, base or b"", timeout=STATE_TIMEOUT)
            except WorkerCrashed as exc:
                if attempt:
                    raise SandboxError(f"sandbox worker failed during reset: {exc}") from None
                continue
            except RequestTooLarge as exc:
                raise SandboxError(f"cannot restore this snapshot: {exc}") from None
            if reply.get("ok") is True:
                break
            if attempt:
                raise SandboxError(f"reset failed: {reply.get('error')}")
        self._writes.clear()
        self._base = None if base is None else bytes(base)
        self._image = _SEED if base is None else self._base
        self._failed = None

    def _seed_bytes(self) -> bytes:
        if self._seed is None:
            self._seed = store.load_seed_bytes(self.domain_dir / self.spec.seed_path)
        return self._seed

    def _state(self) -> StateOracle:
        if self._oracle is None:
            self._oracle = StateOracle(self.spec.tables, self._seed_bytes(), read_state_oracle(self.domain_dir))
        return self._oracle

    def state_oracle(self) -> StateOracle:
        """The domain's state oracle (hash and diff of database images, in this process; built once)."""
        return self._state()

    def _lost(self) -> str:
        return f"the episode's state was lost ({self._failed}); reset the environment"

    def _current_image(self) -> bytes:
        """The state's database image: known here, or the worker's snapshot (a worker that cannot
        take one, e.g. out of memory, is replaced and the episode rebuilt, once)."""
        if self._failed:
            raise SandboxError(self._lost())
        if self._image is _SEED:
            return self._seed_bytes()
        if self._image is not None:
            return self._image
        for attempt in range(2):
            try:
                reply, out = self.worker.request({"op": "snapshot"}, timeout=STATE_TIMEOUT)
            except WorkerCrashed as exc:
                reply, out = {"ok": False, "error": str(exc)}, b""
            else:
                if reply.get("ok") is True and out:
                    self._image = out
                    return out
                self.worker.restarts += 1
                self._fresh()
            if attempt:
                raise SandboxError(f"sandbox worker failed during snapshot: {reply.get('error')}")
            self._recover(None)
            if self._failed:
                raise SandboxError(self._lost())
        raise AssertionError("unreachable")

    def state_hash(self) -> str:
        """Canonical hash of the episode's state (column policies applied), computed here."""
        return self._state().hash(self._current_image())

    def diff(self, against: bytes | None = None) -> list[dict[str, Any]]:
        """Field-level diff from `against` (a snapshot(); default: the seed) to the current state."""
        return self._state().diff(self._current_image(), against or None)

    def snapshot(self) -> bytes:
        """The episode's database image (restore() it later, or diff(against=...))."""
        return self._current_image()

    def restore(self, snapshot: bytes) -> None:
        """Continue the episode from a snapshot() (the replay log restarts from there)."""
        self._begin(bytes(snapshot))

    # recovery -----------------------------------------------------------------------------------
    def _recover(self, before: Any) -> None:
        """The worker now holds a fresh child (the seed): rebuild the episode there from its base
        image and a replay of its writes. `before` is the state before the failed operation when
        known here (_SEED, an image, or None). The episode fails unless every replayed write
        succeeds with its recorded output and, where `before` is known, the rebuilt state hashes
        equal to it."""
        self._image = None
        try:
            if self._base is not None:
                reply, _ = self.worker.request({"op": "reset"}, self._base, timeout=STATE_TIMEOUT)
                if reply.get("ok") is not True:
                    raise SandboxError(f"restore failed: {reply.get('error')}")
            if self._writes:
                reply, _ = self.worker.request(
                    {"op": "batch", "calls": [[n, a, "write"] for n, a, _ in self._writes]},
                    timeout=self.worker.time_limit * len(self._writes) + STATE_TIMEOUT)
                results = reply.get("results")
                if not isinstance(results, list) or len(results) != len(self._writes):
                    raise SandboxError("the replay's reply does not match its calls")
                for (n, _, out), r in zip(self._writes, results):
                    if not isinstance(r, dict) or r.get("ok") is not True:
                        raise SandboxError(f"write {n} failed on replay: {r.get('error') if isinstance(r, dict) else r}")
                    recorded = json.loads(out) if isinstance(out, bytes) else out
                    if not _same_output(recorded, r.get("content")):
                        raise SandboxError(f"write {n} answered differently on replay")
            if before is not None:
                want = self._seed_bytes() if before is _SEED else before
                reply, now = self.worker.request({"op": "snapshot"}, timeout=STATE_TIMEOUT)
                oracle = self._state()
                if reply.get("ok") is not True or oracle.hash(now) != oracle.hash(want):
                    raise SandboxError("the rebuilt state differs from the state before the crash")
                self._image = now
        except (WorkerCrashed, SandboxError, RequestTooLarge, ValueError) as exc:
            self._failed = f"rebuilding it after the sandbox was restarted failed: {exc}"
            self._image = None
