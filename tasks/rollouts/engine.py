"""The rollout engine: many conversations at once, each against its own sandboxed environment.

One conversation = one (scenario, trial) (tasks.rollouts.conversation). Conversations start grouped
by domain (by_domain), so a server's prompt cache serves each domain's system prompt and tools.
Many run at once on one event loop: LLM calls are async (LLMClient keeps a concurrency limit per
endpoint); against single-slot servers each conversation holds one server for all its turns (its
lane), one conversation per server, so the prompt cache keeps its prefix. Tool calls and state
hashes are blocking and run in a thread pool (one thread per conversation in flight) so the loop
keeps other conversations moving. Each conversation holds one Environment of its
domain, taken from a per-domain pool and reset to the seed; a broken worker is replaced, never
reused. Finished trajectories go to the run's file as they come (tasks.rollouts.writer).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, AsyncIterator

from agentscaler import progress
from agentscaler.artifacts import load_scenarios
from agentscaler.hashing import content_hash
from agentscaler.llm import LLMClient
from agentscaler.models import Scenario
from agentscaler.workspace import Workspace, atomic_write_json
from envs.episode import Environment
from envs.spec import DomainSpec
from tasks.rollouts.agent import domain_setup
from tasks.rollouts.conversation import RolloutConfig, blocking, run_conversation, trajectory_id
from tasks.rollouts.users import LLMUser, ScriptedUser
from tasks.rollouts.writer import TrajectoryWriter


def default_run_id(model: str, cfg: RolloutConfig, trials: int, scenario_ids: list[str]) -> str:
    keep = cfg.model_dump(exclude={"max_in_flight", "unsafe", "turn_retries", "retry_wait"})
    if not keep["stop_when_failed"]:
        del keep["stop_when_failed"]  # runs made before the setting existed keep their ids (and resume)
    if keep["repeat_penalty"] is None:
        del keep["repeat_penalty"]  # the server's default: as runs made before the setting existed
    return "r" + content_hash({"model": model, "cfg": keep, "trials": trials, "scenarios": sorted(scenario_ids)}, 12)


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
            env = await blocking(self.executor, lambda: Environment.open(self.domain_dir, unsafe=self.unsafe,
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
                await blocking(self.executor, env.close)
            else:
                self.free.append(env)
            self._cond.notify()

    def close(self) -> None:
        for env in self.all:
            env.close()
        self.all.clear()
        self.free.clear()


def by_domain(scenarios: list[Scenario]) -> list[Scenario]:
    """The scenarios grouped by domain (domains in order of first appearance, scenarios in their
    order): consecutive conversations share the domain's system prompt and tool list, the prompt
    prefix an LLM server's cache serves (llama.cpp's one slot keeps only the last prompt)."""
    first = {d: i for i, d in enumerate(dict.fromkeys(s.domain for s in scenarios))}
    return sorted(scenarios, key=lambda s: first[s.domain])


def in_flight_limit(client: LLMClient) -> int:
    """Conversations at once: 2 per request slot, so a slot never waits on a tool call or a user
    turn; but one per server against single-slot servers (the local llama.cpp ones), where a second
    conversation would only interleave its prompts with the first's and evict the prompt cache."""
    if client.concurrency == 1:
        return len(client.endpoints)
    return 2 * client.concurrency * len(client.endpoints)


def lanes(client: LLMClient) -> list[str] | None:
    """Single-slot servers: each conversation in flight holds one server (its lane) for all its
    turns, so that server's one-slot prompt cache keeps the conversation's prefix and each turn
    evaluates only the new messages (measured on a trained model's 8-turn conversations on one
    1-thread server: 2.5 s a request in turn, 6 s interleaved with another conversation, growing with
    the context). Servers with many slots (vLLM) cache prefixes across slots: no lanes."""
    return list(client.endpoints) if client.concurrency == 1 else None


@contextlib.asynccontextmanager
async def holding(free: asyncio.Queue[str] | None) -> AsyncIterator[str | None]:
    """One lane from `free` for the block (None without lanes), given back after it."""
    if free is None:
        yield None
        return
    lane = await free.get()
    try:
        yield lane
    finally:
        free.put_nowait(lane)


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
        jobs = [(s, k) for s in by_domain(scenarios) for k in range(trials)
                if trajectory_id(run_id, s.id, k) not in writer.ids]
        skipped = len(scenarios) * trials - len(jobs)
        limit = cfg.max_in_flight or in_flight_limit(client)
        per_domain = Counter(s.domain for s, _ in jobs)
        pools: dict[str, EnvPool] = {}
        setup: dict[str, tuple[list[dict[str, Any]], str]] = {}
        failed_domains: dict[str, str] = {}
        for d in per_domain:
            try:
                spec = DomainSpec.load(ws.domain_dir(d))
                setup[d] = domain_setup(spec)
                pools[d] = EnvPool(ws.domain_dir(d), min(limit, per_domain[d]), cfg.unsafe)
            except Exception as exc:  # noqa: BLE001
                failed_domains[d] = f"{type(exc).__name__}: {exc}"[:300]
        sem = asyncio.Semaphore(limit)
        free_lanes: asyncio.Queue[str] | None = None
        if (servers := lanes(client)) is not None:
            free_lanes = asyncio.Queue()
            for url in servers:
                free_lanes.put_nowait(url)
        executor = ThreadPoolExecutor(max_workers=limit + 4, thread_name_prefix="rollout-env")
        for p in pools.values():
            p.executor = executor
        end_reasons: Counter = Counter()
        errors: list[str] = []
        durations: list[float] = []

        async def one(s: Scenario, k: int) -> None:
            if s.domain in failed_domains:
                return
            async with sem, holding(free_lanes) as lane:
                pool = pools[s.domain]
                try:
                    env = await pool.acquire()
                except Exception as exc:  # noqa: BLE001 - the domain's worker does not start
                    failed_domains.setdefault(s.domain, f"{type(exc).__name__}: {exc}"[:300])
                    return
                broken = False
                traj = None
                try:
                    await blocking(executor, env.reset, s)
                    user = (ScriptedUser(s, cfg.patience, goal_check=cfg.goal_check) if cfg.user == "scripted"
                            else LLMUser(s, user_client or client, k, cfg.user_temperature, cfg.user_max_tokens,
                                         lane=lane if user_client in (None, client) else None))
                    tools, system = setup[s.domain]
                    traj = await run_conversation(s, k, run_id, client, env, user, cfg, tools, system, executor, lane)
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

        async def counted(s: Scenario, k: int, bar: progress.Stage) -> None:
            try:
                await one(s, k)
            finally:
                bar.advance(note=s.domain)

        try:
            with progress.stage("conversations", total=len(jobs), unit="conversations") as bar:
                await asyncio.gather(*(counted(s, k, bar) for s, k in jobs))
        finally:
            stop.set()
            await sampler
            await blocking(executor, lambda: [p.close() for p in pools.values()])
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
                     domains: list[str] | None = None, scenario_ids: list[str] | None = None) -> list[Scenario]:
    """Scenarios of a split, spread over domains round-robin (first N per a stable order);
    `scenario_ids` keeps only those (an evaluation set: tasks.evaluation.eval_set)."""
    wanted = set(scenario_ids) if scenario_ids is not None else None
    by_domain: dict[str, list[Scenario]] = {}
    for d in domains if domains is not None else ws.domain_ids():
        rows = [s for s in load_scenarios(ws, d) if (split == "all" or s.split == split)
                and (wanted is None or s.id in wanted)]
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
                 timeout: float = 120, use_cache: bool = True, scenario_ids: list[str] | None = None) -> dict[str, Any]:
    """Plain entry point (CLI, Prefect task): select scenarios, run them, return the report."""
    cfg = cfg or RolloutConfig()
    scenarios = select_scenarios(ws, split, max_scenarios, domains, scenario_ids)
    run_id = run_id or default_run_id(model, cfg, trials, [s.id for s in scenarios])
    cache = ws.cache_dir / "llm.sqlite" if use_cache else None

    async def go() -> dict[str, Any]:
        async with LLMClient(base_url, model=model, concurrency=concurrency, cache_path=cache, timeout=timeout) as c:
            return await rollout_async(ws, scenarios, run_id, c, trials=trials, cfg=cfg)

    return asyncio.run(go())
