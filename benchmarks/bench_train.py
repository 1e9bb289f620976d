"""CPU SFT throughput: tokens/s and peak memory, tiny model vs SmolLM2-135M, side by side.

Each model trains a few optimizer steps of stage 1 (batch 2, no accumulation) on the test
fixture trajectories, in its own process (so peak RSS is that model's). Reported: median step
time over the steps after the first (warm-up), tokens/s = mean tokens per step / median step
time, peak RSS, first/last loss. torch threads default to 1 (--threads). Short on purpose; the machine is shared.

    .venv/bin/python benchmarks/bench_train.py [--steps 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one(model: str, steps: int, threads: int) -> dict:
    """Train `steps` steps in this process; print one JSON line."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tests.training.conftest import write_rollouts

    from agentscaler.workspace import Workspace
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from training.config import StageConfig
    from training.sft import run

    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        write_rollouts(ws)
        check_contamination(ws, sources=("tau2",))  # the export refuses unscreened workspaces
        export_sft(ws, stages=(1,), max_length=1024)
        cfg = StageConfig(stage=1, model=model, max_length=1024, learning_rate=1e-4, warmup_ratio=0.0,
                          per_device_train_batch_size=2, gradient_accumulation_steps=1, logging_steps=1,
                          save_steps=10_000, torch_threads=threads)
        r = run(cfg, Path(tmp), max_steps=steps)
    times = r["step_seconds"][1:] or r["step_seconds"]
    med = statistics.median(times)
    out = {"model": model, "steps": r["global_step"], "median_step_s": med,
           "tokens_per_step": r["tokens_per_step"], "tokens_per_s": r["tokens_per_step"] / med,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "first_loss": r["first_loss"], "last_loss": r["last_loss"],
           "torch_threads": __import__("torch").get_num_threads()}
    print("BENCH " + json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--models", default="tiny,smollm2-135m")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: best on a shared 2-core box)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.one:
        one(args.one, args.steps, args.threads)
        return
    rows = []
    for model in args.models.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", model, "--steps", str(args.steps),
                               "--threads", str(args.threads)], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")]
        if proc.returncode != 0 or not line:
            print(f"{model}: failed (rc {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(line[0][6:]))
    print(f"{'model':<14} {'steps':>5} {'median step s':>14} {'tok/step':>9} {'tok/s':>8} {'peak RSS MiB':>13} {'loss first->last':>18}")
    for r in rows:
        print(f"{r['model']:<14} {r['steps']:>5} {r['median_step_s']:>14.2f} {r['tokens_per_step']:>9.0f} "
              f"{r['tokens_per_s']:>8.0f} {r['peak_rss_mib']:>13.0f} {r['first_loss']:>8.3f}->{r['last_loss']:.3f}")
    if len(rows) == 2:
        print(f"ratio tokens/s {rows[0]['model']}/{rows[1]['model']}: {rows[0]['tokens_per_s'] / rows[1]['tokens_per_s']:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
