"""Rollouts: a simulated user talks to the agent, the agent calls the domain's tools, we record it all.

One conversation = one (scenario, trial). Many run at once on one event loop: LLM calls are
async (LLMClient keeps a concurrency limit per endpoint), tool calls and state hashes are
blocking and run in a thread pool (one thread per conversation in flight) so the loop keeps other conversations moving.
Each conversation holds one Environment of its domain, taken from a per-domain pool and reset
to the seed; a broken worker is replaced, never reused.

The conversation ends when the user sends STOP, at the turn limit, or on a fatal error (a
non-transient LLM error, transient errors that outlast `turn_retries`, a sandbox failure). A
transient error retries the *turn*, not the conversation. The user's stop is refused once (per
announcement, at most twice a conversation) when the agent's last message announced an action
and no call followed it (tau2-bench's "user quits while the agent is still working" failure).

Trajectories are appended to `rollouts/<run-id>/trajectories.jsonl` as each finishes (write,
flush, fsync under an exclusive run lock), so a crash loses at most the conversations in
flight; a torn last line is cut off on the next start; trajectory ids are content hashes of
(run id, scenario id, trial) and a resumed run skips ids already in the file.

Trajectory.tokens holds token counts (agent_prompt, agent_completion, user_prompt,
user_completion) and event counts prefixed `n_` (n_tool_calls, n_tool_errors, n_format_errors,
n_stop_refused, n_turn_retries, n_sandbox_errors, n_step_limit...), which the verifier reads.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentscaler.hashing import content_hash
from agentscaler.llm import LLMClient, LLMError
from agentscaler.models import Scenario, Trajectory
from agentscaler.workspace import Workspace, atomic_write_json, read_jsonl
from envs.spec import DomainSpec
from tasks.rollouts.agent import agent_system_prompt, agent_turn
from tasks.rollouts.users import LLMUser, ScriptedUser, UserTurn, last_agent_text, read_goal_values, reply_has_values

TRAJECTORIES = "trajectories.jsonl"
END_REASONS = ("user_stop", "turn_limit", "fatal_error")

_ANNOUNCE_RE = re.compile(
    r"\b(i will|i'll|i am going to|i'm going to|let me|i am now|i'm now|i'm (?:placing|cancell?ing|updating|processing|"
    r"changing|booking|creating|deleting)|i am (?:placing|cancell?ing|updating|processing|changing|booking|creating|"
    r"deleting)|one moment|please wait|hold on|proceeding (?:to|with))\b", re.IGNORECASE)


class RolloutConfig(BaseModel):
    """Everything that shapes a conversation (the run id hashes it, so a re-run resumes)."""

    model_config = ConfigDict(extra="forbid")

    user: Literal["scripted", "llm"] = "scripted"
    max_turns: int = Field(10, ge=1)  # user turns after the first message
    max_steps: int = Field(8, ge=1)  # agent tool-call rounds within one turn
    temperature: float = 0.0
    user_temperature: float = 0.0
    max_tokens: int = 512
    user_max_tokens: int = 200
    patience: int = Field(8, ge=1)  # the scripted user's own limit
    turn_retries: int = Field(3, ge=0)  # after LLMClient's own retries are spent
    retry_wait: float = 1.0
    max_stop_refusals: int = 2
    max_in_flight: int | None = None  # conversations at once (default: 2 x the client's total slots)
    unsafe: bool = False  # run tool code without the sandbox's isolation (tests on machines without it)


def trajectory_id(run_id: str, scenario_id: str, trial: int) -> str:
    return content_hash({"run": run_id, "scenario": scenario_id, "trial": trial})


def default_run_id(model: str, cfg: RolloutConfig, trials: int, scenario_ids: list[str]) -> str:
    keep = cfg.model_dump(exclude={"max_in_flight", "unsafe", "turn_retries", "retry_wait"})
    return "r" + content_hash({"model": model, "cfg": keep, "trials": trials, "scenarios": sorted(scenario_ids)}, 12)


def announces_action(text: str | None) -> bool:
    return bool(text) and bool(_ANNOUNCE_RE.search(text or ""))


def pending_write(messages: list[dict[str, Any]]) -> bool:
    """The agent's last message is text announcing an action, and no tool call followed it."""
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls") and announces_action(last.get("content"))


# --- files ----------------------------------------------------------------------------------------

class TrajectoryWriter:
    """Append-only trajectories file of one run, held under an exclusive lock while open."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / TRAJECTORIES
        self._lock_fh = open(self.run_dir / "run.lock", "a+")
        try:
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise RuntimeError(f"run {self.run_dir.name} is being written by another process ({self.run_dir}/run.lock)")
        self._repair_tail()
        self.ids = {r.get("id") for r in read_jsonl(self.path)} if self.path.exists() else set()
        self._fh = open(self.path, "a", encoding="utf-8")
        self._pending: list[tuple[str, str, Any]] = []
        self._flushing = False

    def _repair_tail(self) -> None:
        """Cut a torn last line (crash mid-append) so the next append starts on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if data.endswith(b"\n"):
                return
            fh.truncate(data.rfind(b"\n") + 1)
            fh.flush()
            os.fsync(fh.fileno())

    def append_sync(self, traj: Trajectory) -> None:
        self._append_lines([(traj.model_dump_json() + "\n", traj.id)])

    async def append(self, traj: Trajectory, executor: Any = None) -> None:
        """Append and fsync; returns once the line is durable. Lines finishing together share one
        fsync (group commit), so the disk does not serialize the conversations."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((traj.model_dump_json() + "\n", traj.id, fut))
        if not self._flushing:
            self._flushing = True
            try:
                while self._pending:
                    batch, self._pending = self._pending, []
                    try:
                        await _blocking(executor, self._append_lines, [(line, tid) for line, tid, _ in batch])
                    except BaseException as exc:  # noqa: BLE001 - every waiter of the batch learns it
                        for _, _, f in batch:
                            if not f.done():
                                f.set_exception(exc)
                        continue
                    for _, _, f in batch:
                        if not f.done():
                            f.set_result(None)
            finally:
                self._flushing = False
        await fut

    def _append_lines(self, lines: list[tuple[str, str]]) -> None:
        self._fh.write("".join(line for line, _ in lines))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.ids.update(tid for _, tid in lines)

    def close(self) -> None:
        self._fh.close()
        self._lock_fh.close()


def load_trajectories(ws: Workspace, run_id: str) -> list[Trajectory]:
    path = ws.rollout_dir(run_id) / TRAJECTORIES
    return [Trajectory.model_validate(r) for r in read_jsonl(path)] if path.exists() else []


# --- environments ---------------------------------------------------------------------------------

class EnvPool:
    """Open Environments of one domain, at most `size`, opened lazily, reused across conversations."""

    def __init__(self, domain_dir: Path, size: int, unsafe: bool = False, executor: Any = None):
        self.domain_dir, self.size, self.unsafe = Path(domain_dir), max(1, size), unsafe
        self.executor = executor
        self.free: list[Any] = []
        self.all: list[Any] = []
        self.opening = 0
        self._cond: asyncio.Condition | None = None

    async def acquire(self) -> Any:
        from envs.episode import Environment

        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            while not self.free and len(self.all) + self.opening >= self.size:
                await self._cond.wait()
            if self.free:
                return self.free.pop()
            self.opening += 1
        try:
            # spin_us=0: a conversation's next call comes after an LLM reply, never within the spin,
            # so spinning would only burn the engine's CPU (and the GIL its event loop needs).
            env = await _blocking(self.executor, lambda: Environment.open(self.domain_dir, unsafe=self.unsafe,
                                                                          spin_us=0))
        finally:
            async with self._cond:
                self.opening -= 1
                self._cond.notify()
        self.all.append(env)
        return env

    async def release(self, env: Any, broken: bool = False) -> None:
        assert self._cond is not None
        async with self._cond:
            if broken:
                self.all.remove(env)
                await _blocking(self.executor, env.close)
            else:
                self.free.append(env)
            self._cond.notify()

    def close(self) -> None:
        for env in self.all:
            env.close()
        self.all.clear()
        self.free.clear()


# --- one conversation -----------------------------------------------------------------------------

class _Fatal(Exception):
    pass


async def _retry_turn(fn: Callable[[], Any], cfg: RolloutConfig, counters: Counter, who: str = "user") -> Any:
    """Run one turn; a transient LLM error (after the client's own retries) re-runs the same turn.
    A fatal one names whose turn it was (verification attributes it: tasks.verify.verify.attribute)."""
    for attempt in range(cfg.turn_retries + 1):
        try:
            return await fn()
        except LLMError as exc:
            if not exc.transient or attempt == cfg.turn_retries:
                raise _Fatal(f"{type(exc).__name__}: {exc} ({who} turn)") from exc
            counters["turn_retries"] += 1
            await asyncio.sleep(cfg.retry_wait * 2 ** attempt)
    raise AssertionError("unreachable")


async def _blocking(executor: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking call (tool call, state hash, file write) off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)


async def run_conversation(scenario: Scenario, trial: int, run_id: str, client: LLMClient, env: Any,
                           user: Any, cfg: RolloutConfig, tools: list[dict[str, Any]], system: str,
                           executor: Any = None) -> Trajectory:
    """One user-agent-tool conversation on a reset environment; returns the finished Trajectory.

    Blocking environment work runs in `executor` (default: the loop's); the engine passes a pool
    with a thread per conversation in flight, since the default pool has only a handful."""
    counters: Counter = Counter()
    tokens: Counter = Counter()
    times: Counter = Counter()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    started, t0 = time.time(), time.perf_counter()
    end_reason, error = "turn_limit", None
    goal_values = read_goal_values(scenario) if scenario.read_only else []
    refused_at = -1

    def add_user(turn: UserTurn) -> None:
        messages.append({"role": "user", "content": turn.text})
        tokens["user_prompt"] += turn.usage.get("prompt_tokens", 0)
        tokens["user_completion"] += turn.usage.get("completion_tokens", 0)
        times["user_llm_s"] += turn.latency_s

    async def goal_reached() -> bool:
        if not user.needs_goal_check:
            return False
        if scenario.read_only:
            return reply_has_values(last_agent_text(messages), goal_values) or (
                not goal_values and any(m.get("role") == "tool" for m in messages)
                and bool(last_agent_text(messages)))
        t = time.perf_counter()
        h = await _blocking(executor, env.state_hash)
        times["goal_check_s"] += time.perf_counter() - t
        return h == scenario.gold_hash

    try:
        turn = await _retry_turn(user.first, cfg, counters)
        add_user(turn)
        if turn.stop:
            end_reason = "user_stop"
        else:
            for _ in range(cfg.max_turns):
                for step in range(cfg.max_steps):
                    msg, reply, ferr = await _retry_turn(
                        lambda: agent_turn(client, messages, tools, temperature=cfg.temperature,
                                           max_tokens=cfg.max_tokens, salt=trial, seed=trial), cfg, counters,
                        who="agent")
                    messages.append(msg)
                    counters["agent_turns"] += 1
                    if ferr is not None:
                        counters["format_errors"] += 1
                        break
                    tokens["agent_prompt"] += reply.usage.get("prompt_tokens", 0)
                    tokens["agent_completion"] += reply.usage.get("completion_tokens", 0)
                    times["agent_llm_s"] += reply.latency_s
                    if not reply.tool_calls:
                        break
                    for call in reply.tool_calls:
                        t = time.perf_counter()
                        res = await _blocking(executor, env.call, call["name"], call["arguments"])
                        times["tool_s"] += time.perf_counter() - t
                        counters["tool_calls"] += 1
                        if not res.ok:
                            counters["tool_errors"] += 1
                            if "sandbox was restarted" in (res.error or ""):
                                counters["sandbox_errors"] += 1
                        messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["name"],
                                         "content": res.text()})
                else:
                    counters["step_limit"] += 1
                reached = await goal_reached()
                turn = await _retry_turn(lambda: user.respond(messages, reached), cfg, counters)
                if turn.stop and pending_write(messages) and refused_at != len(messages) \
                        and counters["stop_refused"] < cfg.max_stop_refusals:
                    counters["stop_refused"] += 1
                    refused_at = len(messages)
                    turn = await _retry_turn(lambda: user.nudge(messages), cfg, counters)
                add_user(turn)
                counters["user_turns"] += 1
                if turn.stop:
                    end_reason = "user_stop"
                    break
    except _Fatal as exc:
        end_reason, error = "fatal_error", f"llm: {exc}"
    except Exception as exc:  # noqa: BLE001 - a sandbox or engine failure ends this conversation only
        end_reason, error = "fatal_error", f"environment: {type(exc).__name__}: {exc}"
    final_hash, final_diff = "", []
    try:
        final_hash = await _blocking(executor, env.state_hash)
        final_diff = await _blocking(executor, env.diff)
    except Exception as exc:  # noqa: BLE001
        end_reason, error = "fatal_error", error or f"environment: {type(exc).__name__}: {exc}"
    times["total_s"] = time.perf_counter() - t0
    times["started"] = started
    tokens.update({f"n_{k}": v for k, v in counters.items()})
    return Trajectory(id=trajectory_id(run_id, scenario.id, trial), run_id=run_id, scenario_id=scenario.id,
                      domain=scenario.domain, trial=trial, messages=messages, tools=tools, final_hash=final_hash,
                      final_diff=final_diff, end_reason=end_reason, error=error,
                      timings={k: round(float(v), 6) for k, v in times.items()}, tokens=dict(tokens),
                      agent_model=client.model, user_kind=user.kind)


# --- many conversations ---------------------------------------------------------------------------

async def _sample_slots(client: LLMClient, samples: list[float], stop: asyncio.Event, every: float = 0.05) -> None:
    total = client.concurrency * len(client.endpoints)
    while not stop.is_set():
        samples.append(sum(getattr(client, "_in_flight", {}).values()) / total)
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass


async def rollout_async(ws: Workspace, scenarios: list[Scenario], run_id: str, client: LLMClient, *,
                        trials: int = 1, cfg: RolloutConfig | None = None,
                        user_client: LLMClient | None = None) -> dict[str, Any]:
    """Run every (scenario, trial) not yet in the run's file; returns the run report."""
    cfg = cfg or RolloutConfig()
    run_dir = ws.rollout_dir(run_id)
    writer = TrajectoryWriter(run_dir)
    t_start = time.perf_counter()
    try:
        atomic_write_json(run_dir / "run.json", {"run_id": run_id, "config": cfg.model_dump(), "trials": trials,
                                                 "model": client.model, "endpoints": client.endpoints,
                                                 "scenarios": sorted({s.id for s in scenarios})})
        jobs = [(s, k) for s in scenarios for k in range(trials)
                if trajectory_id(run_id, s.id, k) not in writer.ids]
        skipped = len(scenarios) * trials - len(jobs)
        limit = cfg.max_in_flight or 2 * client.concurrency * len(client.endpoints)
        per_domain = Counter(s.domain for s, _ in jobs)
        pools: dict[str, EnvPool] = {}
        setup: dict[str, tuple[list[dict[str, Any]], str]] = {}
        failed_domains: dict[str, str] = {}
        for d in per_domain:
            try:
                spec = DomainSpec.load(ws.domain_dir(d))
                setup[d] = ([t.openai_schema() for t in spec.tools], agent_system_prompt(spec.name, spec.description))
                pools[d] = EnvPool(ws.domain_dir(d), min(limit, per_domain[d]), cfg.unsafe)
            except Exception as exc:  # noqa: BLE001
                failed_domains[d] = f"{type(exc).__name__}: {exc}"[:300]
        sem = asyncio.Semaphore(limit)
        executor = ThreadPoolExecutor(max_workers=limit + 4, thread_name_prefix="rollout-env")
        for p in pools.values():
            p.executor = executor
        end_reasons: Counter = Counter()
        errors: list[str] = []
        durations: list[float] = []

        async def one(s: Scenario, k: int) -> None:
            if s.domain in failed_domains:
                return
            async with sem:
                pool = pools[s.domain]
                try:
                    env = await pool.acquire()
                except Exception as exc:  # noqa: BLE001 - the domain's worker does not start
                    failed_domains.setdefault(s.domain, f"{type(exc).__name__}: {exc}"[:300])
                    return
                broken = False
                traj = None
                try:
                    await _blocking(executor, env.reset, s)
                    user = (ScriptedUser(s, cfg.patience) if cfg.user == "scripted"
                            else LLMUser(s, user_client or client, k, cfg.user_temperature, cfg.user_max_tokens))
                    tools, system = setup[s.domain]
                    traj = await run_conversation(s, k, run_id, client, env, user, cfg, tools, system, executor)
                    broken = traj.end_reason == "fatal_error" and (traj.error or "").startswith("environment")
                except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                    broken = True
                    errors.append(f"{s.id}#{k}: {type(exc).__name__}: {exc}"[:300])
                finally:
                    await pool.release(env, broken)
            if traj is not None:  # outside the slot: the next conversation starts while this one is written
                try:
                    await writer.append(traj, executor)
                except OSError as exc:
                    errors.append(f"{s.id}#{k}: not written: {type(exc).__name__}: {exc}"[:300])
                    return
                end_reasons[traj.end_reason] += 1
                durations.append(traj.timings.get("total_s", 0.0))

        samples: list[float] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_slots(client, samples, stop))
        try:
            await asyncio.gather(*(one(s, k) for s, k in jobs))
        finally:
            stop.set()
            await sampler
            await _blocking(executor, lambda: [p.close() for p in pools.values()])
            executor.shutdown(wait=False)
        wall = time.perf_counter() - t_start
        written = sum(end_reasons.values())
        report = {"run_id": run_id, "path": str(writer.path), "planned": len(scenarios) * trials, "written": written,
                  "skipped_existing": skipped, "errors": errors, "failed_domains": failed_domains,
                  "end_reasons": dict(end_reasons), "wall_s": round(wall, 3),
                  "sims_per_hour": round(written / wall * 3600, 1) if wall > 0 and written else 0.0,
                  "median_conversation_s": round(statistics.median(durations), 3) if durations else None,
                  "slot_utilization": round(statistics.fmean(samples), 4) if samples else None,
                  "max_in_flight": limit, "llm": client.stats()}
        atomic_write_json(run_dir / "report.json", report)
        return report
    finally:
        writer.close()


def select_scenarios(ws: Workspace, split: str = "train", max_scenarios: int | None = None,
                     domains: list[str] | None = None) -> list[Scenario]:
    """Scenarios of a split, spread over domains round-robin (first N per a stable order)."""
    from tasks.scenarios.build import load_scenarios

    by_domain: dict[str, list[Scenario]] = {}
    for d in domains if domains is not None else ws.domain_ids():
        rows = [s for s in load_scenarios(ws, d) if split == "all" or s.split == split]
        if rows:
            by_domain[d] = sorted(rows, key=lambda s: s.id)
    out: list[Scenario] = []
    i = 0
    while any(i < len(v) for v in by_domain.values()):
        out.extend(v[i] for v in by_domain.values() if i < len(v))
        i += 1
    return out[:max_scenarios] if max_scenarios is not None else out


def run_rollouts(ws: Workspace, base_url: str | list[str], *, model: str = "smollm2-135m", trials: int = 1,
                 split: str = "train", max_scenarios: int | None = None, domains: list[str] | None = None,
                 cfg: RolloutConfig | None = None, run_id: str | None = None, concurrency: int = 8,
                 timeout: float = 120, use_cache: bool = True) -> dict[str, Any]:
    """Plain entry point (CLI, Prefect task): select scenarios, run them, return the report."""
    cfg = cfg or RolloutConfig()
    scenarios = select_scenarios(ws, split, max_scenarios, domains)
    run_id = run_id or default_run_id(model, cfg, trials, [s.id for s in scenarios])
    cache = ws.cache_dir / "llm.sqlite" if use_cache else None

    async def go() -> dict[str, Any]:
        async with LLMClient(base_url, model=model, concurrency=concurrency, cache_path=cache, timeout=timeout) as c:
            return await rollout_async(ws, scenarios, run_id, c, trials=trials, cfg=cfg)

    return asyncio.run(go())


def rollout_domain(ws: Workspace, domain_id: str, base_url: str | list[str], run_id: str, **kwargs: Any) -> dict[str, Any]:
    """One domain's batch of conversations (the ARCHITECTURE.md <stage>_domain shape)."""
    return run_rollouts(ws, base_url, domains=[domain_id], run_id=run_id, **kwargs)


# --- Prefect --------------------------------------------------------------------------------------

def _task_fn(ws_root: str, domain_id: str, base_url: str | list[str], run_id: str, **kwargs: Any) -> dict[str, Any]:
    if isinstance(kwargs.get("cfg"), dict):
        kwargs["cfg"] = RolloutConfig(**kwargs["cfg"])
    return rollout_domain(Workspace(ws_root), domain_id, base_url, run_id, **kwargs)


def _make_task() -> Callable[..., Any]:
    from prefect import task

    from agentscaler.errors import transient_only

    return task(name="rollout", retries=2, retry_delay_seconds=5, retry_condition_fn=transient_only,
                tags=["rollout"])(_task_fn)


def __getattr__(name: str) -> Any:
    """`rollout_task` (one Prefect task run = one domain's batch) is built on first use (Prefect imports slowly).
    A retried task resumes: finished trajectories of the run are skipped."""
    if name == "rollout_task":
        globals()["rollout_task"] = t = _make_task()
        return t
    raise AttributeError(name)
