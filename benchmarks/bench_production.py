"""Production figures: the same N domains built locally, then on a real Prefect server with 1 and
with 2 process workers on cpu-pool (batches as deployment runs), side by side in one run.

    python -m benchmarks.bench_production [--domains 40] [--batch-size 10] [--corpus bfcl]

Writes benchmarks/results/production.md: wall time of each mode, the 1-vs-2-worker ratio and the
per-domain overhead of server mode over local mode (ms), with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from agentscaler.corpora import fetch
from agentscaler.workspace import Workspace
from tasks.corpus.ingest import ingest
from tasks.discover.discover import discover
from tests.deployments.prefect_server import BIN, cli, prefect_server, server_env, start_worker, stop

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "production.md"


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}: {res.stderr[-2000:]}")
    return wall, json.loads(res.stdout)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--per-domain", type=int, default=4)
    ap.add_argument("--corpus", default="bfcl")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-prod-"))
    base = Workspace(root / "base")
    ingest(base, [fetch(a.corpus)])
    discover(base)
    found = len(json.loads(base.domains_path.read_text()))
    n = min(a.domains, found)
    for name in ("local", "w1", "w2"):
        shutil.copytree(base.root, root / name)
    build = ["build", "--per-domain", str(a.per_domain), "--limit", str(n), "--json"]
    rows = []
    home = root / "prefect-home"
    # local mode: the ephemeral Prefect of the CLI, one flow run, domains on the thread pool
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    load0 = _load()
    wall, out = _timed([str(BIN / "agentscaler"), "-w", str(root / "local"), *build], env)
    rows.append(("local (ephemeral Prefect, thread pool)", wall, out.get("built"), load0))
    with prefect_server(home) as url:
        res = cli(home, url, "-w", str(root / "w1"), "deploy", "--json")
        assert res.returncode == 0, res.stderr
        senv = server_env(home, url)
        trig = ["--deployment", "build-environments", "--wait", "--batch-size", str(a.batch_size)]
        for name, count in (("w1", 1), ("w2", 2)):
            # one worker per "host" taking one batch at a time (the batches queue); the parent run
            # waits on its own worker (the default queue), as in tests/deployments/test_production.py
            workers = [start_worker(home, url, "cpu-pool", f"{name}-parent", cwd=root, queue="default")]
            workers += [start_worker(home, url, "cpu-pool", f"{name}-{i}", cwd=root, limit=1, queue="batches")
                        for i in range(count)]
            try:
                time.sleep(10)  # the workers poll the pool
                load0 = _load()
                wall, out = _timed([str(BIN / "agentscaler"), "-w", str(root / name), *build, *trig], senv)
                if not out.get("completed"):
                    raise RuntimeError(f"{name}: {out}")
                status = json.loads(cli(home, url, "-w", str(root / name), "status", "--json").stdout)["domains"]
                by = sorted({(d["worker"] or "?").split("@")[0] for d in status})
                rows.append((f"server, {count} worker(s) on cpu-pool ({', '.join(by)})", wall,
                             sum(d["status"] == "done" for d in status), load0))
            finally:
                for w in workers:
                    stop(w)
    local, one, two = rows[0][1], rows[1][1], rows[2][1]
    lines = ["# Production: local vs server, 1 vs 2 batch workers", "",
             f"Same {n} domains of the `{a.corpus}` corpus ({a.per_domain} scenarios each), batch size "
             f"{a.batch_size}; CLI wall time including Prefect start-up; `python -m benchmarks.bench_production`.",
             "Server rows: a parent worker on the default queue plus 1 or 2 workers on the batches queue, "
             "each taking one batch run at a time (one worker = one host's share of the pool).",
             "Machine: 2 cores shared with other jobs (load average 1/5/15 min at the start of each row).", "",
             "| mode | wall s | domains built | load |", "|---|---|---|---|"]
    lines += [f"| {m} | {w:.1f} | {b} | {ld} |" for m, w, b, ld in rows]
    lines += ["", f"- 2 workers vs 1: wall-time ratio {two / one:.2f} (1-worker time / 2-worker time = {one / two:.2f}x)",
              f"- server mode (1 worker) over local mode: {(one - local) / n * 1000:.0f} ms per domain"]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
