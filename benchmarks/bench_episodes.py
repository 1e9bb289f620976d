"""Live episodes for RL (issue 20 aim 2): many concurrent episodes over many domains on this machine.

    .venv/bin/python benchmarks/bench_episodes.py --workspace WS [--quick] [--episodes 1024] [--domains 128]

E episodes over D domains of a built workspace (round robin), all open at once, in two designs side
by side: a worker per episode (`Environment.open`: a zygote plus the episode's child) and hosted
episodes (`Environment.open_hosted`: --per-worker episodes in one sandbox worker, each its own seed
copy, connection and tools.py namespace); isolation layers as in every run. Measured:
  - time to open every episode (open + reset), median and p99 per worker;
  - memory of every process of ours (this one and its descendants): the sum of PSS from
    /proc/PID/smaps_rollup (pages shared between the zygote and its child counted once, split),
    and the number of processes;
  - aggregate read calls/s for --seconds, the per-call latency (median, p99), and the CPU time of
    every process of ours per call (utime + stime from /proc, the workers included: on a shared
    machine the wall figures move with the load, CPU per call much less). Two ways of calling:
    plain calls (`env.call`, --threads caller threads, each owning a disjoint share of the
    episodes, one call at a time) and vectorized steps (`Environment.call_many`, as RL frameworks
    step many environments per call: --step-threads caller threads, each owning a disjoint share
    of the workers, a step is one call of every episode of --step-workers workers, one message
    per worker; a call's latency is then its step's round trip, from call_many to its return).
    Calls are the read-only scenarios' gold calls of each domain (grounded arguments, answers from
    the seed); the caller does not busy-wait (spin 0: with hundreds of workers a spinning caller
    only burns the cores the workers need);
  - after the calls, every episode still answers (a call per episode).
Before opening the full count it opens --probe episodes and extrapolates memory; if the estimate is
over --max-gib it records the extrapolation (labelled so) instead of opening the rest, so this
benchmark never pushes a shared machine into swap.
--quick: 64 episodes over 16 domains, 8 threads, 10 s of calls. Aims (issue 20 aim 2): 1,024
episodes over >= 100 domains open in <= 10 s, <= 4 GiB, >= 5,000 calls/s, p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.artifacts import load_scenarios  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from benchmarks.results_io import Figure, Recorder, p99  # noqa: E402
from envs.episode import Environment, SandboxError  # noqa: E402
from tests.fault.orphans import descendants  # noqa: E402

AIM_OPEN_S, AIM_GIB, AIM_RATE, AIM_P99_MS = 10.0, 4.0, 5000.0, 5.0


def pss_gib(pids: list[int]) -> float:
    total_kb = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
                    break
        except OSError:
            continue
    return total_kb / (1 << 20)


def read_calls(ws: Workspace, limit_domains: int) -> dict[str, list[tuple[str, dict]]]:
    """Domain id -> grounded read calls (gold calls of its read-only scenarios), for domains that have some."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for d in ws.domain_ids():
        calls = [(c.name, c.arguments) for s in load_scenarios(ws, d) if s.read_only for c in s.gold_calls]
        if calls:
            out[d] = calls
        if len(out) >= limit_domains:
            break
    return out


def open_episodes(ws: Workspace, domains: list[str], n: int, per_worker: int, pool: ThreadPoolExecutor
                  ) -> tuple[list[tuple[str, Environment]], list[float], list[str]]:
    """n episodes over the domains, round robin by worker: per_worker 1 is an Environment (a worker)
    each; more is Environment.open_hosted (one worker serving per_worker episodes). Workers open on
    the pool's threads, which must outlive them (a worker dies with the thread that started it: the
    parent-death signal is per thread). Returns the episodes, the open time per worker, and errors."""
    jobs, left, i = [], n, 0
    while left > 0:
        jobs.append((domains[i % len(domains)], min(per_worker, left)))
        left, i = left - per_worker, i + 1

    def one(job: tuple[str, int]) -> tuple[list[tuple[str, Environment]], float, str | None]:
        d, k = job
        t = time.perf_counter()
        try:
            got = [Environment.open(ws.domain_dir(d), spin_us=0)] if per_worker == 1 else \
                Environment.open_hosted(ws.domain_dir(d), k, spin_us=0)
            for env in got:
                env.reset()
        except SandboxError as exc:
            return [], 0.0, f"{d}: {str(exc)[:200]}"
        return [(d, env) for env in got], time.perf_counter() - t, None

    envs, times, errors = [], [], []
    for got, secs, err in pool.map(one, jobs):
        envs += got
        if err:
            errors.append(err)
        else:
            times.append(secs)
    return envs, times, errors


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the live processes (all threads), from /proc."""
    ticks = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


Step = list[tuple[str, Environment]]  # (domain, episode) pairs called together


def shares_of(envs: list[tuple[str, Environment]], threads: int, per_step: int | None) -> list[list[Step]]:
    """Each caller thread's disjoint share of steps. per_step None: plain calls, a step is one
    episode; else the episodes grouped by worker, a step is per_step workers' episodes."""
    if per_step is None:
        return [[[pair] for pair in envs[i::threads]] for i in range(threads)]
    workers: dict[int, Step] = {}
    for d, env in envs:
        workers.setdefault(id(getattr(env.worker, "host", env.worker)), []).append((d, env))
    groups = list(workers.values())
    return [[[pair for g in mine[k:k + per_step] for pair in g] for k in range(0, len(mine), per_step)]
            for mine in (groups[i::threads] for i in range(threads))]


def drive(shares: list[list[Step]], calls: dict[str, list[tuple[str, dict]]], seconds: float,
          vectorized: bool) -> tuple[int, int, list[float]]:
    """One thread per share runs its steps in turn, one read call per episode, until the deadline:
    plain, each call is an env.call; vectorized, a step is one Environment.call_many and every call
    of it gets the step's round trip as its latency."""
    stop = time.perf_counter() + seconds
    lock = threading.Lock()
    lat: list[float] = []
    counts = {"ok": 0, "err": 0}

    def run(share: list[Step]) -> None:
        mine, ok, err, j = [], 0, 0, 0
        while time.perf_counter() < stop:
            for step in share:
                batch = [(env, *calls[d][j % len(calls[d])]) for d, env in step]
                t = time.perf_counter()
                got = Environment.call_many(batch) if vectorized else [env.call(n, a) for env, n, a in batch]
                mine += [time.perf_counter() - t] * len(got)
                good = sum(r.ok for r in got)
                ok, err = ok + good, err + len(got) - good
            j += 1
        with lock:
            lat.extend(mine)
            counts["ok"] += ok
            counts["err"] += err

    with ThreadPoolExecutor(len(shares)) as pool:
        list(pool.map(run, [s for s in shares if s]))
    return counts["ok"], counts["err"], lat


def measure(rec: Recorder, ws: Workspace, calls: dict[str, list[tuple[str, dict]]], a: argparse.Namespace,
            per_worker: int, workload: str) -> None:
    """One design's figures (per_worker 1: a worker per episode; more: hosted episodes)."""
    domains = sorted(calls)
    design = "a worker per episode" if per_worker == 1 else f"{per_worker} hosted episodes per worker"
    base_pss = pss_gib([os.getpid()])
    opener = ThreadPoolExecutor(a.open_threads)  # kept until the episodes close (see open_episodes)
    t0 = time.perf_counter()
    probe = min(a.episodes, max(a.probe, per_worker))
    envs, open_times, errors = open_episodes(ws, domains, probe, per_worker, opener)
    per_episode_gib = (pss_gib([os.getpid(), *descendants(os.getpid())]) - base_pss) / max(1, len(envs))
    estimate = base_pss + per_episode_gib * a.episodes
    extrapolated = estimate > a.max_gib
    if not extrapolated and a.episodes > probe:
        rest = domains[(probe // per_worker) % len(domains):] + domains[:(probe // per_worker) % len(domains)]
        more, more_t, more_err = open_episodes(ws, rest, a.episodes - probe, per_worker, opener)
        envs, open_times, errors = envs + more, open_times + more_t, errors + more_err
    open_wall = time.perf_counter() - t0
    pids = [os.getpid(), *descendants(os.getpid())]
    gib = pss_gib(pids)
    if envs and not rec.layers:
        rec.layers = sorted(k for k, v in envs[0][1].isolation.items() if v)
    n, full = len(envs), a.episodes >= 1024
    label = f", {design}" + ("" if not extrapolated else
                             f" (extrapolated from {n} open: the estimate {estimate:.1f} GiB is over --max-gib {a.max_gib:g})")
    open_total = open_wall if not extrapolated else open_wall / max(1, n) * a.episodes
    memory = gib if not extrapolated else estimate
    rec.figures += [
        Figure(name=f"open {a.episodes} episodes (open + reset), total{label}", value=round(open_total, 2),
               unit="s", workload=workload, aim=f"<= {AIM_OPEN_S:g} s for 1,024 (issue 20 aim 2)",
               meets_aim=(open_total <= AIM_OPEN_S) if full else None),
        Figure(name=f"open one worker and its episodes{label}", value=round(statistics.median(open_times) * 1e3, 1),
               unit="ms", median=round(statistics.median(open_times) * 1e3, 1), p99=round(p99(open_times) * 1e3, 1),
               workload=workload),
        Figure(name=f"memory of every process, {a.episodes} episodes (PSS){label}", value=round(memory, 2),
               unit="GiB", workload=workload, aim=f"<= {AIM_GIB:g} GiB for 1,024 (issue 20 aim 2)",
               meets_aim=(memory <= AIM_GIB) if full else None),
        Figure(name=f"processes for {n} open episodes{label}", value=len(pids), unit="processes", workload=workload),
    ]
    ways: list[tuple[str, int | None]] = [(f"plain calls (env.call), {a.threads} caller threads, latency per call", None)]
    for k in ([int(x) for x in a.step_workers.split(",")] if per_worker > 1 else []):
        ways.append((f"vectorized steps (Environment.call_many: {k} worker(s) x {per_worker} episodes "
                     f"per step, one message per worker), {a.step_threads} caller threads, "
                     f"a call's latency = its step's round trip", k))
    for way, per_step in ways:
        if not envs:
            break
        cpu0 = cpu_seconds(pids)
        shares = shares_of(envs, a.threads if per_step is None else a.step_threads, per_step)
        ok, err, lat = drive(shares, calls, a.seconds, vectorized=per_step is not None)
        cpu = cpu_seconds(pids) - cpu0
        if not lat:
            continue
        rate = (ok + err) / a.seconds
        rec.figures += [
            Figure(name=f"aggregate read calls/s, {n} open episodes, {way}{label}", value=round(rate, 1),
                   unit="calls/s", workload=workload, aim=f">= {AIM_RATE:g}/s (issue 20 aim 2)",
                   meets_aim=(rate >= AIM_RATE) if n >= 1024 else None),
            Figure(name=f"read call latency, {n} open episodes, {way}{label}", value=round(statistics.median(lat) * 1e3, 2),
                   unit="ms", median=round(statistics.median(lat) * 1e3, 2), p99=round(p99(lat) * 1e3, 2),
                   workload=workload, aim=f"p99 <= {AIM_P99_MS:g} ms (issue 20 aim 2)",
                   meets_aim=(p99(lat) * 1e3 <= AIM_P99_MS) if n >= 1024 else None),
            Figure(name=f"CPU per call, every process of ours (caller + workers), {n} open episodes, {way}{label}",
                   value=round(cpu / max(1, ok + err) * 1e6, 1), unit="us", workload=workload),
        ]
        rec.notes.append(f"{design}, {way}: {err} of {ok + err} calls answered with a tool error (counted in "
                         f"the rate); {cpu:.1f} s CPU in {a.seconds:g} s wall ({cpu / a.seconds:.2f} cores)")
    answering = sum(env.call(*calls[d][0]).ok for d, env in envs)
    for _, env in envs:
        env.close()
    opener.shutdown()
    rec.notes += [f"{design}: {len(errors)} workers failed to open" + (f" ({errors[:3]})" if errors else "")
                  + f"; {answering} of {n} episodes answered a last call after the runs"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workspace", type=Path, default=os.environ.get("AGENTSCALER_BENCH_WS"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--episodes", type=int, default=1024)
    ap.add_argument("--domains", type=int, default=128)
    ap.add_argument("--per-worker", type=int, default=8, help="hosted episodes per worker (beside 1 per worker)")
    ap.add_argument("--threads", type=int, default=32, help="caller threads for plain calls")
    ap.add_argument("--step-threads", type=int, default=2, help="caller threads for vectorized steps")
    ap.add_argument("--step-workers", default="1,4",
                    help="workers per vectorized step; a comma-separated list measures each (latency vs rate)")
    ap.add_argument("--open-threads", type=int, default=16,
                    help="workers opened at once (their start is mostly waiting: 16 opened ~1.8x faster than 4 at load 14)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--probe", type=int, default=32)
    ap.add_argument("--max-gib", type=float, default=10.0)
    a = ap.parse_args()
    if a.quick:
        a.episodes, a.domains, a.threads, a.seconds, a.probe = 64, 16, 8, 10.0, 16
    with Recorder("episodes") as rec:
        if a.workspace is None or not Path(a.workspace).is_dir():
            rec.notes.append("not measured: no workspace given (--workspace or AGENTSCALER_BENCH_WS)")
            rec.write("Not measured: no built workspace was given.\n")
            print("no workspace: nothing measured", file=sys.stderr)
            return
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # about 5 descriptors per open worker
        ws = Workspace(Path(a.workspace))
        calls = read_calls(ws, a.domains)
        workload = (f"real: {Path(a.workspace).name}, {a.episodes} episodes over {len(calls)} domains "
                    f"(gold read calls of read-only scenarios), "
                    f"{'quick' if a.quick else 'full'}")
        for per_worker in (1, a.per_worker):  # side by side, same run
            measure(rec, ws, calls, a, per_worker, workload)
        rows = "\n".join(f"| {f.name} | {f.value:g} {f.unit} | {f.p99 if f.p99 is not None else '—'} | {f.aim or '—'} |"
                         for f in rec.figures)
        rec.write(f"Live episodes, {workload}.\n\n| figure | value | p99 | aim |\n|---|---|---|---|\n{rows}\n\n"
                  + "\n".join(f"- {x}" for x in rec.notes) + "\n")
    for f in rec.figures:
        print(f"{f.name}: {f.value:g} {f.unit}" + (f" (p99 {f.p99:g})" if f.p99 is not None else ""))


if __name__ == "__main__":
    main()
