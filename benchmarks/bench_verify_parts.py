"""Where replay verification's time goes: CPU per trajectory of each part, on a real workspace.

The parts of `verify_run`, done one after another in one thread with the domains' sandbox workers
open (so each part's CPU is its own; process time, which the machine's load changes far less than
wall time): read (orjson + validation), scenarios, argument validators, static checks, the replay
round trips on the verifier's side (calls checked, encoded, replies decoded), the state hash of
each written image, verdicts, the two files written, freeing the run; and the sandbox processes'
CPU over the same replays (/proc). The first use of each domain's state oracle (its seed digests)
is counted apart: a long-lived verifier pays it once per domain; with the digests and pages a
build stores beside the seed (envs.episode.ORACLE_FILE: the workspace's are written first where
missing, as `build` writes them) it costs less, and a second table times opening the oracles
both ways.

    .venv/bin/python benchmarks/bench_verify_parts.py --workspace WS [--quick]

WS: a real workspace with a gold-replay run (bench_verify.py builds one with --build); only read, but
for the state oracles' files beside the seeds (written where missing, as `build` writes them).
--quick: its first 40 domains. Without --workspace (or AGENTSCALER_BENCH_WS) nothing is measured.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

from bench_verify import GOLD_RUN, LAYERS, QUICK_DOMAINS, sandbox_cpu_s, staged  # noqa: E402
from results_io import Figure, Recorder  # noqa: E402

from agentscaler.artifacts import TRAJECTORIES, domain_scenarios, read_trajectory_rows  # noqa: E402
from agentscaler.workspace import Workspace, atomic_write_bytes, atomic_write_jsonl  # noqa: E402
from envs.episode import Environment  # noqa: E402
from tasks.verify.replay import Replayed, Replayer  # noqa: E402
from tasks.verify.verify import DomainTools, _embedded, _verdict_out, check_dialogue, judge  # noqa: E402


def parts(ws: Workspace) -> tuple[int, dict[str, float], float, float]:
    """(trajectories, CPU seconds by part in the verifier, CPU seconds in the sandbox processes: on
    this first pass, its children fresh from the zygote; on a second pass of the same replays)."""
    cpu: Counter = Counter()
    clock = [time.process_time()]

    def tick(name: str) -> None:
        now = time.process_time()
        cpu[name] += now - clock[0]
        clock[0] = now

    gc.disable()  # as verify_run
    source = ws.rollout_dir(GOLD_RUN) / TRAJECTORIES
    rows = list(read_trajectory_rows(source, share_tools=True))  # as verify_run
    kept = [r for r in rows if r[1] is not None]
    trajs, raws, members = [r[1] for r in kept], [r[4] for r in kept], [r[5] for r in kept]
    linenos = [int(r[0].rsplit(":", 1)[1]) for r in kept]
    tick("read: orjson parse + validation")
    by: dict[str, list] = {}
    for t in trajs:
        by.setdefault(t.domain, []).append(t)
    domains = sorted(by)
    pool = ThreadPoolExecutor(4)  # lives as long as the workers (a worker dies with its thread)
    envs = dict(zip(domains, pool.map(lambda d: Environment.open(ws.domain_dir(d), spin_us=0), domains)))
    calls: dict[str, list] = {}
    try:
        clock[0] = time.process_time()
        s0 = sandbox_cpu_s(list(envs.values()))
        with Replayer(ws.root / "domains", envs) as rep:
            rep.prefetch(domains)
            for d in domains:
                rep.domain(d)
            tick("state oracles' first use (seed digests; once per domain)")
            for d in domains:
                scenarios = {s.id: s for s in domain_scenarios(ws.domain_dir(d), {t.scenario_id for t in by[d]})}
                tick("load scenarios")
                rp = rep.domain(d)
                tools = DomainTools(rp.env.spec)
                tick("argument validators")
                items = [(t, scenarios[t.scenario_id], check_dialogue(t, scenarios[t.scenario_id], tools))
                         for t in by[d]]
                tick("static checks")
                calls[d] = [i[2].calls for i in items]
                got = list(rp.env.replay(calls[d]))
                tick("replay round trips, verifier side")
                reps = []
                for (res, image), (_, sc, _) in zip(got, items):
                    h = rp._hash(image)
                    reps.append(Replayed(res, h, None if h == sc.gold_hash else rp._diff(image)))
                tick("state hash of written images")
                for (t, sc, dlg), r in zip(items, reps):
                    t.verdict = judge(t, sc, tools, dlg, r)
                tick("verdicts")
            sandbox = sandbox_cpu_s(list(envs.values())) - s0
            for d in domains:  # the same replays again: children that have served a round trip
                list(rep.domain(d).env.replay(calls[d]))
            warm = sandbox_cpu_s(list(envs.values())) - s0 - sandbox
    finally:
        for e in envs.values():
            e.close()
        pool.shutdown()
    clock[0] = time.process_time()
    out = ws.rollout_dir("bench-parts")
    atomic_write_jsonl(out / "verified.jsonl", [{"trajectory_id": t.id, "scenario_id": t.scenario_id, "domain": t.domain,
                                                 "trial": t.trial, "verdict": t.verdict.model_dump()} for t in trajs])
    tick("write verified.jsonl")
    outs = [_verdict_out(t, raw, ..., m) for t, raw, m in zip(trajs, raws, members)]
    tick("encode the verdicts")
    data = source.read_bytes()  # verify_run maps the file instead
    chunks = _embedded(data, list(zip(linenos, outs)))
    tick("read the trajectories back + cut them around the verdicts")
    atomic_write_bytes(out / TRAJECTORIES, chunks)
    tick("write + fsync the trajectories")
    n = len(trajs)
    del rows, kept, trajs, raws, members, by, outs, chunks, data
    tick("free the run's objects")
    gc.enable()
    return n, dict(cpu), sandbox, warm


def oracle_opening(ws: Workspace, domains: list[str], repeats: int = 3) -> dict[str, float]:
    """CPU seconds (min of `repeats`) to open every domain's state oracle, seed read included,
    as a verifier opens it: with the digests and pages a build stored beside the seed
    (envs.episode.ORACLE_FILE; stored here first where missing or stale, as a build does), and
    computing them (no stored file: a workspace built before it existed). No sandbox."""
    from envs import store
    from envs.episode import read_state_oracle, write_state_oracle
    from envs.spec import DomainSpec
    from envs.state import StateOracle

    dirs = [ws.domain_dir(d) for d in domains]
    for d in dirs:
        write_state_oracle(d)
    specs = [DomainSpec.load(d) for d in dirs]
    out: dict[str, list[float]] = {"stored": [], "computed": []}
    for _ in range(repeats):
        for mode in out:
            c0 = time.process_time()
            for d, spec in zip(dirs, specs):
                o = StateOracle(spec.tables, store.load_seed_bytes(d / spec.seed_path),
                                read_state_oracle(d) if mode == "stored" else None)
                assert o.from_store == (mode == "stored")
                o.close()
            out[mode].append(time.process_time() - c0)
    return {k: min(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", type=Path, default=os.environ.get("AGENTSCALER_BENCH_WS") or None)
    ap.add_argument("--quick", action="store_true", help=f"The first {QUICK_DOMAINS} domains.")
    a = ap.parse_args()
    md = []
    with Recorder("verify_parts") as rec, tempfile.TemporaryDirectory(prefix="bench-verify-parts-") as tmp:
        rec.layers = list(LAYERS)
        if a.workspace is None:
            rec.notes.append("no real workspace given (--workspace or AGENTSCALER_BENCH_WS): nothing measured")
        else:
            ws, doms = staged(Path(a.workspace), a.quick, Path(tmp))
            opened = oracle_opening(ws, doms[:QUICK_DOMAINS] if a.quick else doms)
            n, cpu, sandbox, warm = parts(ws)
            label = (f"real ({'quick' if a.quick else 'full'}): {a.workspace} gold replays, {n} trajectories, "
                     f"{QUICK_DOMAINS if a.quick else len(doms)} domains")
            md += [f"{label}; CPU per trajectory (process time), each part alone in one thread.\n",
                   "| part | us per trajectory | share |", "|---|---|---|"]
            total = sum(cpu.values()) + sandbox
            for name, s in [*cpu.items(), ("sandbox processes: tool code, episodes, images (children fresh)", sandbox)]:
                us = 1e6 * s / n
                rec.figures.append(Figure(name=f"verification CPU: {name}", value=round(us, 1), unit="us/trajectory",
                                          median=round(us, 1), workload=label))
                md.append(f"| {name} | {us:.1f} | {100 * s / total:.0f}% |")
            md.append(f"| total | {1e6 * total / n:.1f} | 100% |")
            rec.figures.append(Figure(name="verification CPU: sandbox processes, the same replays again",
                                      value=round(1e6 * warm / n, 1), unit="us/trajectory", median=round(1e6 * warm / n, 1),
                                      workload=label))
            md.append(f"| (not in the total) sandbox processes, the same replays again (children that have served "
                      f"one round trip) | {1e6 * warm / n:.1f} | |")
            k = QUICK_DOMAINS if a.quick else len(doms)
            md += ["", "Opening the state oracles alone (seed read + oracle; min of 3; no sandbox): the seed's "
                   "digests and pages as a build stored them (envs.episode.ORACLE_FILE), or computed.\n",
                   "| state oracles | ms per domain | us per trajectory |", "|---|---|---|"]
            for mode, s in opened.items():
                rec.figures.append(Figure(name=f"state oracles' opening, digests {mode}", value=round(1e3 * s / k, 3),
                                          unit="ms/domain", median=round(1e3 * s / k, 3), workload=label))
                md.append(f"| digests {mode} | {1e3 * s / k:.3f} | {1e6 * s / n:.1f} |")
            md.append(f"| ratio computed / stored | {opened['computed'] / opened['stored']:.2f}x | |")
            rec.notes.append("one thread, parts one after another: no overlap of the verifier with the sandbox")
    print(rec.write("\n".join(md)).read_text())


if __name__ == "__main__":
    main()
