"""Scenario construction: throughput (including gold execution in the sandbox), lengths, drops.

    .venv/bin/python benchmarks/bench_scenarios.py [--repeats 5] [--per-domain 50] [--max-length 4]

One Environment per domain is opened once and reset between walks (as build_scenarios does
when given `env`). Reports medians over repeats (different seeds), with and without the
replay check, and the length distribution and drop reasons of the last full run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.episode import Environment  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from tasks.scenarios.build import generate  # noqa: E402
from tasks.scenarios.config import ScenarioParams  # noqa: E402
from tests.data.domains.shop.build import build_shop  # noqa: E402


def run(env, spec, d, params):
    t0 = time.perf_counter()
    scen, rep = generate(env, spec, d, spec.id, params)
    dt_s = time.perf_counter() - t0
    return (len(scen) / dt_s, rep["attempts"] / dt_s), scen, rep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--per-domain", type=int, default=50)
    ap.add_argument("--max-length", type=int, default=4)
    args = ap.parse_args()
    unsafe = os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"
    with tempfile.TemporaryDirectory() as tmp:
        d = build_shop(Path(tmp) / "shop")
        spec = DomainSpec.load(d)
        t0 = time.perf_counter()
        env = Environment.open(d, unsafe=unsafe)
        open_s = time.perf_counter() - t0
        try:
            rates = {"with_replay": [], "no_replay": []}
            walks = {"with_replay": [], "no_replay": []}
            last = None
            for r in range(args.repeats):
                for mode, verify in (("with_replay", True), ("no_replay", False)):
                    p = ScenarioParams(per_domain=args.per_domain, max_length=args.max_length, seed=r, verify_replay=verify)
                    (rate, wrate), scen, rep = run(env, spec, d, p)
                    rates[mode].append(rate)
                    walks[mode].append(wrate)
                    if verify:
                        last = (scen, rep)
        finally:
            env.close()
    scen, rep = last
    lengths = Counter(len(s.gold_calls) for s in scen)
    by_kind = Counter((len(s.gold_calls), "read" if s.read_only else "write") for s in scen)
    dropped = rep["dropped"]
    out = {
        "domain": "shop (fixture: 7 tools, 9 edges)", "per_domain": args.per_domain, "max_length": args.max_length,
        "repeats": args.repeats, "env_open_s": round(open_s, 3),
        "scenarios_per_s_median": {k: round(statistics.median(v), 1) for k, v in rates.items()},
        "walks_per_s_median": {k: round(statistics.median(v), 1) for k, v in walks.items()},
        "replay_cost_ratio": round(statistics.median(rates["no_replay"]) / statistics.median(rates["with_replay"]), 2),
        "kept_share": round(rep["kept"] / rep["attempts"], 3), "attempts": rep["attempts"], "kept": rep["kept"],
        "dropped": dropped, "counters": rep["counters"], "read_only": rep["read_only"], "write": rep["write"],
    }
    print(json.dumps(out, indent=2))
    print("\nlength | read | write | total")
    for n in sorted(lengths):
        print(f"{n:6d} | {by_kind[(n, 'read')]:4d} | {by_kind[(n, 'write')]:5d} | {lengths[n]:5d}")
    print("\nwalks: attempts", rep["attempts"], "kept", rep["kept"],
          "dropped", ", ".join(f"{k}={v}" for k, v in sorted(dropped.items())) or "none")


if __name__ == "__main__":
    main()
