"""benchmarks/results/gpu.{json,md} from the folders that `run.sh` filled on lent GPUs (one folder per run).

Why a script: the figures are copied from the device's own result JSONs, never typed by hand, and
repeated runs are reduced to medians (the machine is shared; one run can be slow).

    python benchmarks/gpu/collect.py /work/.device/1 /work/.device/2 /work/.device/3 --date 2026-12-04
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[0] / "results"


def read_runs(dirs: list[Path]) -> list[dict[str, Any]]:
    """One entry per run folder: the device line and versions from run.log, and each stage's result JSON."""
    runs = []
    for d in dirs:
        log = (d / "run.log").read_text(errors="replace").splitlines()
        device = log[1] if len(log) > 1 and log[0].startswith("name,") else ""  # nvidia-smi's CSV: header, then the GPU
        versions = next((line for line in log if line.startswith("torch ")), "")
        stages = {z: json.loads((d / f"zero{z}.json").read_text()) for z in (2, 3) if (d / f"zero{z}.json").exists()}
        runs.append({"folder": d.name, "device": device.strip(), "versions": versions.strip(), "stages": stages})
    return runs


def medians(runs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out = {}
    for z in (2, 3):
        rs = [r["stages"][z] for r in runs if z in r["stages"]]
        if not rs:
            continue
        out[z] = {"runs": len(rs), "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
                  "mfu": statistics.median(r["mfu"] for r in rs), "median_step_s": statistics.median(r["median_step_s"] for r in rs),
                  "tokens_per_s_min": min(r["tokens_per_s"] for r in rs), "tokens_per_s_max": max(r["tokens_per_s"] for r in rs),
                  "peak_memory_gib": max(r["peak_memory_gib"] for r in rs),
                  "engagement_recorded": sum("zero_stage_engaged" in r for r in rs),
                  "zero_stage_engaged": sorted({r["zero_stage_engaged"] for r in rs if "zero_stage_engaged" in r}),
                  "zero_optimizer": sorted({r["zero_optimizer"] for r in rs if "zero_optimizer" in r})}
    return out


def median_table(med: dict[int, dict[str, Any]]) -> str:
    """The medians as a Markdown table (also the README's GPU block, benchmarks/run_all.py)."""
    lines = ["| ZeRO | runs | tokens/s (median) | tokens/s (min-max) | median step (s) | MFU (median) | peak mem (GiB) "
             "| engaged (stage, optimizer) |", "|---|---|---|---|---|---|---|---|"]
    for z, m in sorted(med.items(), key=lambda kv: int(kv[0])):
        engaged = (f"stage {', '.join(map(str, m['zero_stage_engaged']))}, {', '.join(m['zero_optimizer'])} "
                   f"(recorded in {m['engagement_recorded']} of {m['runs']} runs)") if m["zero_stage_engaged"] else "not recorded"
        lines.append(f"| {z} | {m['runs']} | {m['tokens_per_s']:.0f} | {m['tokens_per_s_min']:.0f}-{m['tokens_per_s_max']:.0f} "
                     f"| {m['median_step_s']:.3f} | {100*m['mfu']:.1f}% | {m['peak_memory_gib']:.1f} | {engaged} |")
    return "\n".join(lines)


def render(runs: list[dict[str, Any]], med: dict[int, dict[str, Any]], date: str, commit: str) -> str:
    first = next(iter(next(r for r in runs if r["stages"])["stages"].values()))
    lines = [
        "# GPU: TRL SFT through accelerate + DeepSpeed ZeRO-2 / ZeRO-3 (benchmarks/gpu/)",
        "",
        f"Measured {date} on a lent GPU ({runs[0]['device']}), code at {commit}; {runs[0]['versions']}.",
        f"Model: {first['parameters']/1e9:.2f} B parameters built from benchmarks/gpu/model.json (random weights), "
        f"sequences of {first['seq_len']} random tokens, micro-batch {first['micro_batch']}, accumulation "
        f"{first['grad_accum']}, bf16, no gradient checkpointing, {first['steps_timed']} timed steps after the warm-up. "
        f"MFU = tokens/s x (6 N + 12 L d s) / (GPUs x {first['peak_tflops_per_gpu']} TFLOP/s, the H200 datasheet's dense bf16); "
        "about 790 TFLOP/s (80% of it) is what a large bf16 matmul reaches on this device.",
        "One GPU: ZeRO shards over one process, so this measures the DeepSpeed engine's overhead on a real "
        "training step, not scaling across GPUs.",
        "",
        f"Medians over {len(runs)} runs (`run.sh`, each run both stages one after the other):",
        "",
        median_table(med),
    ]
    lines += ["", "Each run:", "", "| run | ZeRO | tokens/s | MFU | median step (s) | engaged |", "|---|---|---|---|---|---|"]
    for r in runs:
        for z, s in r["stages"].items():
            engaged = f"{s['engine']} stage {s['zero_stage_engaged']}" if "zero_stage_engaged" in s else "not recorded (field added after this run)"
            lines.append(f"| {r['folder']} | {z} | {s['tokens_per_s']:.0f} | {100*s['mfu']:.1f}% | {s['median_step_s']:.3f} | {engaged} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--date", required=True)
    ap.add_argument("--commit", required=True, help="the commit whose benchmarks/gpu/ ran")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    runs = read_runs(args.dirs)
    med = medians(runs)
    (args.out / "gpu.json").write_text(json.dumps({"date": args.date, "commit": args.commit, "medians": med, "runs": runs}, indent=1))
    (args.out / "gpu.md").write_text(render(runs, med, args.date, args.commit))
    print((args.out / "gpu.md").read_text())


if __name__ == "__main__":
    main()
