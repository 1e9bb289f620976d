"""Verification throughput: trajectories verified per second, every call replayed in the sandbox.

Main rows: a real workspace's trajectories (distinct scenarios and domains: built from the real
corpora with `agentscaler corpus fetch all`, ingest, discover, build, then gold replays of every
train scenario, run `gold-replay`), verified with `verify_run` (read + static checks + replay +
verdicts + write), medians over repeats:
  - static checks alone (check_dialogue: form, schemas, repetition; no replay, no outcome);
  - replay verification with the domains' sandbox workers already open (a verifier that keeps
    them, as a long-lived one does): each repeat starts with cold caches (no remembered image
    hashes, new argument validators; an environment's state oracle keeps its seed digests, built
    when it was opened); with the CPU time per trajectory in the verifier's process and in the
    sandbox processes (/proc), which the machine's load changes far less than wall time;
  - replay verification from nothing (opening every domain's worker inside the timed run): once;
  - a fresh sandbox child per trajectory (Environment.replay(fresh=True): the rollout's own
    isolation) on a sample, for the cost of the trade tasks/verify/replay.py makes.
Second, labelled row: the shop fixture, copies of its gold replays (60% as recorded, 20% ended at
the turn limit, 20% missing their last call; 1 in 100 with a forged recorded hash).
The machine's load (os.getloadavg) is reported before and after. Aim: >= 2,000 trajectories/s on 2 cores.

    .venv/bin/python benchmarks/bench_verify.py --workspace WS [--build] [--repeats 3] [--out FILE]

--build makes WS first if it has no gold-replay run (corpus fetch, ingest, discover, build with the
rule-based synthesizer, gold replays: several minutes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.artifacts import TRAJECTORIES, load_scenarios, load_trajectories, scenario_map  # noqa: E402
from agentscaler.corpora import CORPORA, fetch  # noqa: E402
from agentscaler.models import Trajectory  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from envs.episode import Environment  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from tasks.corpus.ingest import ingest  # noqa: E402
from tasks.discover.discover import discover  # noqa: E402
from tasks.environments.synthesize import synthesize_all  # noqa: E402
from tasks.rollouts.conversation import trajectory_id  # noqa: E402
from tasks.rollouts.gold import gold_replay, gold_trajectory  # noqa: E402
from tasks.scenarios.build import build_all, build_scenarios  # noqa: E402
from tasks.verify.replay import Replayer  # noqa: E402
from tasks.verify.verify import DomainTools, check_dialogue, verify_run  # noqa: E402
from tests.conftest import load_shop_builder  # noqa: E402

GOLD_RUN = "gold-replay"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def build_workspace(ws: Workspace) -> None:
    """The real workspace: real corpora -> tools -> domains -> environments -> scenarios -> gold replays."""
    for name in CORPORA:
        fetch(name)
    ingest(ws, list(CORPORA))
    discover(ws)
    synthesize_all(ws)
    build_all(ws)
    gold_replay(ws, ws.domain_ids(), GOLD_RUN)


def stage(ws: Workspace, src: Path, run: str) -> None:
    """A fresh, verdict-free copy of the trajectories as run `run`."""
    d = ws.rollout_dir(run)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    shutil.copyfile(src, d / TRAJECTORIES)


def static_alone(ws: Workspace, trajs: list[Trajectory]) -> float:
    """Seconds for the static checks of every trajectory, scenarios and specs loaded (new
    validators: cold), the cyclic GC paused as verify_run pauses it."""
    gc.disable()
    try:
        t0 = time.perf_counter()
        scenarios = scenario_map(ws, {t.domain for t in trajs})
        tools = {d: DomainTools(DomainSpec.load(ws.domain_dir(d))) for d in {t.domain for t in trajs}}
        for t in trajs:
            check_dialogue(t, scenarios[t.scenario_id], tools[t.domain])
        return time.perf_counter() - t0
    finally:
        gc.enable()


def sandbox_cpu_s(envs: list[Environment]) -> float:
    """CPU seconds used so far by these environments' sandbox processes (bubblewrap, the zygote and
    its children: the live ones' own time, the reaped ones' through their parent), from /proc."""
    kids: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append(int(p))
        ticks[int(p)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, stack = 0, [e.worker.proc.pid for e in envs if e.worker.proc is not None]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(kids.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


def row(name: str, n: int, times: list[float], reports: list[dict] | None = None, **extra) -> dict:
    med = statistics.median(times)
    out = {"row": name, "trajectories": n, "repeats": len(times), "median_s": round(med, 4),
           "trajectories_per_s": round(n / med, 1), "load_before_after": extra.pop("load")}
    if reports:
        rep = reports[-1]
        out["median_parts_s"] = {k: round(statistics.median(r["seconds"][k] for r in reports), 4)
                                 for k in rep["seconds"]}
        out["median_parts_s"]["verify_of_which_replay_and_verdicts"] = round(statistics.median(
            r["replay"]["seconds"] for r in reports), 4)
        out.update(passed=rep["passed"], reasons={k: v for k, v in rep["reasons"].items() if v},
                   replayed_fresh=rep["replay"]["replayed_fresh"], unstable=rep["replay"]["unstable"],
                   failed_domains=len(rep["replay"]["failed_domains"]))
    return {**out, **extra}


def bench_workspace(ws: Workspace, repeats: int, sample: int) -> list[dict]:
    src = ws.rollout_dir(GOLD_RUN) / TRAJECTORIES
    trajs = load_trajectories(ws, GOLD_RUN)
    domains = sorted({t.domain for t in trajs})
    shape = {"trajectories": len(trajs), "domains": len(domains), "scenarios": len({t.scenario_id for t in trajs}),
             "tool_calls": sum(len(m.get("tool_calls") or []) for t in trajs for m in t.messages),
             "write_scenarios": sum(not s.read_only for s in scenario_map(ws, domains).values()
                                    if s.id in {t.scenario_id for t in trajs}),
             "bytes_per_trajectory": src.stat().st_size // max(len(trajs), 1)}
    rows = []
    ld = load()
    times = [static_alone(ws, trajs) for _ in range(repeats)]
    rows.append(row("real workspace: static checks alone (no replay)", len(trajs), times, load=[ld, load()]))

    ld = load()
    t0 = time.perf_counter()
    envs = {d: Environment.open(ws.domain_dir(d), spin_us=0) for d in domains}
    open_s = time.perf_counter() - t0
    try:
        times, reports, cpu = [], [], []
        for _ in range(repeats):
            stage(ws, src, "bench-verify")
            s0, c0, t0 = sandbox_cpu_s(list(envs.values())), time.process_time(), time.perf_counter()
            with Replayer(ws.root / "domains", envs) as rp:  # new hash caches, DomainTools: cold
                reports.append(verify_run(ws, "bench-verify", replayer=rp))
            times.append(time.perf_counter() - t0)
            cpu.append((time.process_time() - c0, sandbox_cpu_s(list(envs.values())) - s0))
        rows.append(row("real workspace: replay verification, workers open", len(trajs), times, reports,
                        load=[ld, load()], workers_opened_s=round(open_s, 2),
                        cpu_ms_per_trajectory={"verifier": round(1000 * statistics.median(c for c, _ in cpu) / len(trajs), 3),
                                               "sandbox": round(1000 * statistics.median(s for _, s in cpu) / len(trajs), 3)}))

        ld = load()
        picked = trajs[:: max(1, len(trajs) // sample)][:sample]
        by_domain: dict[str, list] = {}
        for t in picked:
            by_domain.setdefault(t.domain, []).append(t)
        t0 = time.perf_counter()
        for d, ts in by_domain.items():
            calls = [[(c["function"]["name"], c["function"]["arguments"]) for m in t.messages
                      for c in m.get("tool_calls") or []] for t in ts]
            list(envs[d].replay(calls, fresh=True))
        fresh_s = time.perf_counter() - t0
        rows.append(row("real workspace: replay only, a fresh sandbox child per trajectory (sample)", len(picked),
                        [fresh_s], load=[ld, load()]))
    finally:
        for e in envs.values():
            e.close()

    ld = load()
    stage(ws, src, "bench-verify")
    t0 = time.perf_counter()
    rep = verify_run(ws, "bench-verify")
    rows.append(row("real workspace: replay verification from nothing (opens every domain's worker)", len(trajs),
                    [time.perf_counter() - t0], [rep], load=[ld, load()]))
    shutil.rmtree(ws.rollout_dir("bench-verify"))
    return [{"workload": shape}] + rows


def shop_copies(ws: Workspace, n: int) -> list[Trajectory]:
    scen = load_scenarios(ws, "shop")
    with Environment.open(ws.domain_dir("shop")) as env:
        golds = [gold_trajectory(s, env, env.tools(), "You are a customer-service agent.", "bench") for s in scen]
    out = []
    per = max(1, n // len(golds))
    for g in golds:
        for k in range(per):
            t = g.model_copy(deep=True, update={"run_id": "bench", "id": trajectory_id("bench", g.scenario_id, k),
                                                "trial": k})
            if k % 5 == 3:
                t.end_reason = "turn_limit"
            elif k % 5 == 4:
                del t.messages[-4:-2]  # the last call and its result, and no recorded state
                t.final_hash = ""
            if k % 100 == 1:
                t.final_hash = "0" * 32
            out.append(t)
    return out


def bench_shop(n: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        load_shop_builder()(ws.domain_dir("shop"))
        build_scenarios(ws, "shop", per_domain=20, seed=0)
        trajs = shop_copies(ws, n)
        src = Path(tmp) / "copies.jsonl"
        src.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
        ld = load()
        with Environment.open(ws.domain_dir("shop"), spin_us=0) as env:
            times, reports = [], []
            for _ in range(repeats):
                stage(ws, src, "bench")
                t0 = time.perf_counter()
                with Replayer(ws.root / "domains", {"shop": env}) as rp:
                    reports.append(verify_run(ws, "bench", replayer=rp))
                times.append(time.perf_counter() - t0)
        return row("shop fixture: copies of 20 scenarios' gold replays (second row)", len(trajs), times, reports,
                   load=[ld, load()], mix=dict(Counter("forged_hash" if t.final_hash == "0" * 32 else t.end_reason
                                                       if t.end_reason != "user_stop" else "missing_last_call"
                                                       if not t.final_hash else "as_recorded" for t in trajs)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", type=Path, help="A real workspace with a gold-replay run (see --build).")
    ap.add_argument("--build", action="store_true", help="Build the workspace first if it has no gold-replay run.")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fresh-sample", type=int, default=200, help="Trajectories replayed one fresh child each.")
    ap.add_argument("--shop-n", type=int, default=5000)
    ap.add_argument("--out", type=Path, help="Also write the results here (JSON).")
    a = ap.parse_args()
    out: dict = {"cpus": os.cpu_count(), "aim_per_s": 2000, "rows": []}
    if a.workspace is not None:
        ws = Workspace(a.workspace)
        if not (ws.rollout_dir(GOLD_RUN) / TRAJECTORIES).exists():
            if not a.build:
                sys.exit(f"{a.workspace} has no {GOLD_RUN} run: pass --build to make it")
            t0 = time.perf_counter()
            build_workspace(ws)
            out["build_s"] = round(time.perf_counter() - t0, 1)
        out["rows"] += bench_workspace(ws, a.repeats, a.fresh_sample)
    out["rows"].append(bench_shop(a.shop_n, a.repeats))
    text = json.dumps(out, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
