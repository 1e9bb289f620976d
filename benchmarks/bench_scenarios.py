"""Scenario construction throughput (gold execution and the replay check in the sandbox), lengths, drops.

    .venv/bin/python benchmarks/bench_scenarios.py [--quick] [--workspace WS] [--domains 60] [--per-domain 20]

First row, real: the domains of a built workspace (`make demo`'s, or any built from the real corpora:
--workspace, else $AGENTSCALER_BENCH_WORKSPACE, else ./workspace), a sample of distinct domains spread
over the whole list; each domain's Environment is opened, its scenarios generated (tasks.scenarios.build
.generate, as `build` does: reset between walks, replay check on) and closed. The rate is reported
with the environment opening inside the timer, and the opening time apart. The workspace is only read.
Second row, fixture: the 7-tool shop domain (opened once, outside the timer), with and without the
replay check, median over repeats; a toy workload that flatters, labelled so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.workspace import Workspace  # noqa: E402
from benchmarks.results_io import Figure, Recorder, percentile  # noqa: E402
from envs.episode import Environment  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from tasks.scenarios.build import generate  # noqa: E402
from tasks.scenarios.config import ScenarioParams  # noqa: E402
from tests.data.domains.shop.build import build_shop  # noqa: E402

AIM = ">= 200 scenarios/s"


def real_workspace(arg: str | None) -> Path:
    ws = Path(arg or os.environ.get("AGENTSCALER_BENCH_WORKSPACE") or ROOT / "workspace")
    if not (ws / "domains").is_dir():
        raise SystemExit(f"no built workspace at {ws} (run `make demo`, or pass --workspace / set "
                         "AGENTSCALER_BENCH_WORKSPACE to a workspace built from the real corpora)")
    return ws


def bench_real(ws_path: Path, n_domains: int, per_domain: int, unsafe: bool) -> dict:
    """Distinct domains, each opened, generated and closed; open time inside one timer and apart."""
    ws = Workspace(ws_path)
    ids = [d for d in ws.domain_ids() if (ws.domain_dir(d) / "spec.json").exists()]
    step = max(1, len(ids) // max(1, n_domains))
    sample = ids[::step][:n_domains]
    opens, gens, per_scen = [], [], []
    made = tools = 0
    failed: dict[str, str] = {}
    dropped: Counter = Counter()
    t_all = time.perf_counter()
    for d in sample:
        ddir = ws.domain_dir(d)
        try:
            spec = DomainSpec.load(ddir)
            t0 = time.perf_counter()
            env = Environment.open(ddir, unsafe=unsafe)
            t1 = time.perf_counter()
            try:
                scen, rep = generate(env, spec, ddir, d, ScenarioParams(per_domain=per_domain, seed=0))
            finally:
                env.close()
            t2 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - counted and shown; the other domains go on
            failed[d] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        opens.append(t1 - t0)
        gens.append(t2 - t1)
        made += len(scen)
        tools += len(spec.tools)
        dropped.update(rep["dropped"])
        if scen:
            per_scen.append((t2 - t1) / len(scen) * 1e3)
    wall = time.perf_counter() - t_all
    return {"workspace_domains": len(ids), "domains": len(sample), "failed": failed, "scenarios": made,
            "tools": tools, "wall_s": wall, "open_s": sum(opens), "generate_s": sum(gens),
            "open_median_ms": statistics.median(opens) * 1e3 if opens else None,
            "open_p99_ms": percentile(opens, 0.99) * 1e3 if opens else None,
            "ms_per_scenario_median": statistics.median(per_scen) if per_scen else None,
            "ms_per_scenario_p99": percentile(per_scen, 0.99) if per_scen else None,
            "rate_with_open": made / wall if wall else 0.0, "rate_without_open": made / sum(gens) if gens else 0.0,
            "dropped": dict(dropped)}


def bench_fixture(repeats: int, per_domain: int, unsafe: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = build_shop(Path(tmp) / "shop")
        spec = DomainSpec.load(d)
        env = Environment.open(d, unsafe=unsafe)
        rates: dict[str, list[float]] = {"with_replay": [], "no_replay": []}
        try:
            for r in range(repeats):
                for mode, verify in (("with_replay", True), ("no_replay", False)):
                    p = ScenarioParams(per_domain=per_domain, max_length=4, seed=r, verify_replay=verify)
                    t0 = time.perf_counter()
                    scen, rep = generate(env, spec, d, spec.id, p)
                    rates[mode].append(len(scen) / (time.perf_counter() - t0))
        finally:
            env.close()
    return {k: (statistics.median(v), percentile(v, 0.99)) for k, v in rates.items()} | {"last": rep, "scenarios": scen}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="bounded: 24 real domains x 10 scenarios, 3 fixture repeats")
    ap.add_argument("--workspace", default=None)
    ap.add_argument("--domains", type=int, default=None, help="real domains sampled (default 120; quick 24)")
    ap.add_argument("--per-domain", type=int, default=None, help="default 20 (quick 10)")
    ap.add_argument("--repeats", type=int, default=None, help="fixture repeats (default 5; quick 3)")
    a = ap.parse_args()
    n_domains = a.domains or (24 if a.quick else 120)
    per_domain = a.per_domain or (10 if a.quick else 20)
    repeats = a.repeats or (3 if a.quick else 5)
    unsafe = os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"
    ws = real_workspace(a.workspace)
    with Recorder("scenarios") as rec:
        real = bench_real(ws, n_domains, per_domain, unsafe)
        fix = bench_fixture(repeats, 50 if not a.quick else 30, unsafe)
    rec.layers = ["sandbox: " + ("off (AGENTSCALER_UNSAFE_SANDBOX=1)" if unsafe else "bwrap + seccomp + rlimits"),
                  "fresh sandbox child per episode", "gold replay check (fixture: also without, apart)"]
    tag = " (quick)" if a.quick else ""
    wl = (f"real: {real['domains']} distinct domains of {real['workspace_domains']} in a workspace built from the "
          f"real corpora, {real['tools']} tools, {real['scenarios']} scenarios{tag}")
    rec.figures += [
        Figure(name="scenario construction, environment opening inside the timer", value=real["rate_with_open"],
               unit="scenarios/s", workload=wl, aim=AIM, meets_aim=real["rate_with_open"] >= 200),
        Figure(name="scenario construction, generation only (opening apart)", value=real["rate_without_open"],
               unit="scenarios/s", workload=wl, aim=AIM, meets_aim=real["rate_without_open"] >= 200),
        Figure(name="per scenario, per domain (generation only)", value=real["ms_per_scenario_median"] or 0,
               unit="ms", median=real["ms_per_scenario_median"], p99=real["ms_per_scenario_p99"], workload=wl),
        Figure(name="environment opening, per domain", value=real["open_median_ms"] or 0, unit="ms",
               median=real["open_median_ms"], p99=real["open_p99_ms"], workload=wl),
        Figure(name="scenario construction with replay check, shop fixture (second row)",
               value=fix["with_replay"][0], unit="scenarios/s", median=fix["with_replay"][0], p99=None,
               workload=f"fixture: 7-tool shop domain, opened outside the timer, {repeats} repeats (flatters){tag}",
               aim=AIM, meets_aim=fix["with_replay"][0] >= 200),
        Figure(name="scenario construction without replay check, shop fixture (second row)",
               value=fix["no_replay"][0], unit="scenarios/s", median=fix["no_replay"][0],
               workload=f"fixture: 7-tool shop domain, opened outside the timer, {repeats} repeats (flatters){tag}"),
    ]
    if real["failed"]:
        rec.notes.append(f"{len(real['failed'])} domains failed: {dict(list(real['failed'].items())[:5])}")
    scen, rep = fix["scenarios"], fix["last"]
    lengths = Counter(len(s.gold_calls) for s in scen)
    md = [f"Real workspace: {real['domains']} domains sampled of {real['workspace_domains']} ({real['tools']} tools), "
          f"{real['scenarios']} scenarios in {real['wall_s']:.1f} s wall: opening {real['open_s']:.1f} s, "
          f"generation {real['generate_s']:.1f} s -> {real['rate_with_open']:.1f}/s with opening, "
          f"{real['rate_without_open']:.1f}/s without; failed domains {len(real['failed'])}; drops {real['dropped']}.",
          "", f"Shop fixture (second row): {fix['with_replay'][0]:.1f}/s with replay, {fix['no_replay'][0]:.1f}/s "
          f"without; last run lengths {dict(sorted(lengths.items()))}, attempts {rep['attempts']}, kept {rep['kept']}, "
          f"dropped {rep['dropped']}."]
    print("\n".join(md))
    print(rec.write("\n".join(md)))


if __name__ == "__main__":
    main()
