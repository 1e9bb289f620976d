"""CPU SFT throughput of SmolLM2-135M: which training settings are fastest on this machine, side by side.

Each variant trains a few optimizer steps of stage 1 in its own process (so peak RSS is its own)
on the same exported rows: the workspace's `sft/stage1/hf` (`--workspace`, e.g. gold replays of
the closed loop) or, without one, the test fixture trajectories. Reported per variant: median
step time over the steps after the first (warm-up), tokens/s = tokens of those steps (TRL's own
count, every token of the row, not only the loss tokens) / their time, loss tokens/s, peak RSS,
first/last loss. Variants differ from `base` (2 threads, batch 1, fp32) in one setting each:

    threads1      torch threads 1
    bs4_group     batch 4, batches of similar length (less padding)
    bs4_padfree   batch 4, padding-free (the batch flattened into one sequence, block-diagonal attention)
    pack          best-fit-decreasing packing into max_length blocks
    bf16          bf16 autocast on the CPU
    freeze_emb    no gradient for the token embedding (tied to the LM head)
    grad_ckpt     gradient checkpointing on (the default is off)
    top10         train only the top 10 of 30 decoder layers (no backward below them)
    bf16_top10    both

    .venv/bin/python benchmarks/bench_train.py [--quick] [--workspace WS] [--steps 5] [--variants base,threads1,...]

Writes benchmarks/results/train.{json,md}: each variant's tokens/s beside `base` measured in the same
run (its anchor). --quick: base and grad_ckpt, 2 steps, 1,024-token rows (minutes per step on a
loaded 2-core machine, so `make bench` runs it only when named: BENCH=train).

The machine is shared: run variants interleaved (--rounds 2) and read ratios, not absolute figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results_io import Anchor, Figure, Recorder  # noqa: E402

BASE = {"torch_threads": 2, "per_device_train_batch_size": 1, "bf16": False}
VARIANTS: dict[str, dict] = {
    "base": {},
    "threads1": {"torch_threads": 1},
    "bs4_group": {"per_device_train_batch_size": 4, "group_by_length": True},
    "bs4_padfree": {"per_device_train_batch_size": 4, "padding_free": True},
    "pack": {"packing": True},
    "bf16": {"bf16": True},
    "freeze_emb": {"freeze_embeddings": True},
    "grad_ckpt": {"gradient_checkpointing": True},
    "top10": {"train_top_layers": 10},
    "bf16_top10": {"bf16": True, "train_top_layers": 10},
}


def sample_rows(src: Path, dst: Path, rows: int, max_length: int) -> str:
    """The first `rows` train rows (and 8 eval rows) of an export that fit max_length (ids are hashes:
    an unbiased sample of those)."""
    from datasets import DatasetDict, load_from_disk

    dd = load_from_disk(str(src))
    fit = {k: v.filter(lambda n: n <= max_length, input_columns="n_tokens") for k, v in dd.items()}
    DatasetDict({k: v.select(range(min(len(v), rows if k == "train" else 8))) for k, v in fit.items()}).save_to_disk(str(dst))
    return str(dst)


def one(variant: str, steps: int, workspace: str | None, max_length: int, model: str, rows: int) -> dict:
    """Train `steps` steps of one variant in this process; print one JSON line."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentscaler.workspace import Workspace
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tests.sft_fixtures import write_rollouts
    from training.config import StageConfig
    from training.sft import run

    with tempfile.TemporaryDirectory() as tmp:
        if workspace:
            data = sample_rows(Path(workspace) / "sft" / "stage1" / "hf", Path(tmp) / "rows", rows, max_length)
        else:
            ws = Workspace(tmp)
            write_rollouts(ws)
            check_contamination(ws, sources=("tau2",))  # the export refuses unscreened workspaces
            export_sft(ws, stages=(1,), max_length=max_length)
            data = str(Path(tmp) / "sft" / "stage1" / "hf")
        cfg = StageConfig(stage=1, model=model, max_length=max_length, learning_rate=1e-4, warmup_ratio=0.0,
                          gradient_accumulation_steps=1, logging_steps=1, save_steps=10**6, dataset_dir=data,
                          output_dir=str(Path(tmp) / "out"), seed=0, **{**BASE, **VARIANTS[variant]})
        r = run(cfg, Path(tmp), max_steps=steps)
    hist = r["curve"]["train"]  # logging_steps=1: one entry per step, with TRL's cumulative token count
    cum = [0.0] + [float(h["tokens"]) for h in hist]
    toks = [b - a for a, b in zip(cum, cum[1:])]
    times = r["step_seconds"]
    measured = list(range(1, min(len(times), len(toks)))) or [0]
    loss_share = r["loss_tokens"] / max(1, r["train_tokens"])
    tok_s = sum(toks[i] for i in measured) / sum(times[i] for i in measured)
    out = {"variant": variant, "model": model, "steps": r["global_step"],
           "median_step_s": statistics.median(times[i] for i in measured), "tokens_per_s": tok_s,
           "loss_tokens_per_s": tok_s * loss_share, "loss_token_share": loss_share,
           "tokens_per_step": statistics.mean(toks[i] for i in measured),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "first_loss": hist[0]["loss"] if hist else None, "last_loss": hist[-1]["loss"] if hist else None,
           "settings": {**BASE, **VARIANTS[variant]}, "rows": r["dataset"]}
    print("BENCH " + json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="base and grad_ckpt, 2 steps, 1,024-token rows")
    ap.add_argument("--steps", type=int, default=None, help="default 5 (quick 2)")
    ap.add_argument("--variants", default=None, help="default every variant (quick base,grad_ckpt)")
    ap.add_argument("--workspace", default=None, help="use this workspace's sft/stage1/hf rows (default: fixtures)")
    ap.add_argument("--max-length", type=int, default=None, help="default 4096 (quick 1024)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=48, help="train rows taken from --workspace's export")
    ap.add_argument("--rounds", type=int, default=1, help="run the variant list this many times, interleaved")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.steps = args.steps or (2 if args.quick else 5)
    args.variants = args.variants or ("base,grad_ckpt" if args.quick else ",".join(VARIANTS))
    args.max_length = args.max_length or (1024 if args.quick else 4096)
    if args.one:
        one(args.one, args.steps, args.workspace, args.max_length, args.model, args.rows)
        return
    with Recorder("train") as rec:
        rows, load = measure(args)
    report(rec, rows, load, args)


def measure(args: argparse.Namespace) -> tuple[list[dict], list[float]]:
    rows: list[dict] = []
    load: list[float] = []
    for _ in range(args.rounds):
        for variant in args.variants.split(","):
            cmd = [sys.executable, __file__, "--one", variant, "--steps", str(args.steps), "--max-length",
                   str(args.max_length), "--model", args.model, "--rows", str(args.rows)]
            cmd += ["--workspace", args.workspace] if args.workspace else []
            load.append(os.getloadavg()[0])
            t = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")]
            if proc.returncode != 0 or not line:
                print(f"{variant}: failed (rc {proc.returncode})\n{proc.stderr[-3000:]}", file=sys.stderr)
                rows.append({"variant": variant, "failed": proc.stderr[-500:]})
                continue
            row = json.loads(line[0][6:])
            row["wall_s"] = round(time.perf_counter() - t, 1)
            rows.append(row)
            print(f"{variant:<12} {row['median_step_s']:>7.2f} s/step {row['tokens_per_s']:>7.0f} tok/s "
                  f"{row['loss_tokens_per_s']:>6.0f} loss-tok/s {row['tokens_per_step']:>7.0f} tok/step "
                  f"{row['peak_rss_mib']:>6.0f} MiB  loss {row['first_loss']:.3f}->{row['last_loss']:.3f}", flush=True)
    return rows, load


def report(rec: Recorder, rows: list[dict], load: list[float], args: argparse.Namespace) -> None:
    ok = [r for r in rows if "failed" not in r]
    print(f"\nload average (1 min) during the runs: {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs")
    by: dict[str, list[float]] = {}
    for r in ok:
        by.setdefault(r["variant"], []).append(r["tokens_per_s"])
    base = statistics.median(by["base"]) if "base" in by else None
    print(f"{'variant':<12} {'median tok/s':>12} {'vs base':>8}")
    for v, xs in by.items():
        med = statistics.median(xs)
        print(f"{v:<12} {med:>12.0f} {med / base if base else float('nan'):>8.2f}")
    wl = (f"{'real: ' + str(args.rows) + ' exported rows of a workspace' if args.workspace else 'fixture: test trajectories'}"
          f", {args.model}, {args.steps} steps, max length {args.max_length}" + (" (quick)" if args.quick else ""))
    for v, xs in by.items():
        med = statistics.median(xs)
        rss = max(r["peak_rss_mib"] for r in ok if r["variant"] == v)
        anchor = None if v == "base" or base is None else Anchor(
            value=base, unit="tokens/s", kind="measured", source="variant base (2 threads, batch 1, fp32), same run")
        rec.figures.append(Figure(name=f"CPU SFT tokens/s, variant {v} (peak {rss:.0f} MiB)", value=med,
                                  unit="tokens/s", median=med, workload=wl, anchor=anchor,
                                  ratio_to_anchor=med / base if anchor else None))
    rec.notes += [f"{r['variant']} failed: {r['failed'][-200:]}" for r in rows if "failed" in r]
    rec.layers = ["none: training runs no tool code"]
    rec.write("```json\n" + json.dumps({"rows": rows, "load": load, "cpus": os.cpu_count()}, indent=2) + "\n```")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "load": load, "cpus": os.cpu_count()}, indent=2))
    shutil.rmtree(Path(tempfile.gettempdir()) / "bench-train", ignore_errors=True)


if __name__ == "__main__":
    main()
