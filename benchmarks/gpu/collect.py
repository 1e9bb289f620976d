"""benchmarks/results/gpu.{json,md} from the folders that `run.sh` filled on lent GPUs (one folder per run).

Why a script: the figures are copied from the device's own result JSONs, never typed by hand, and
repeated runs are reduced to medians (the machine is shared; one run can be slow).

    python benchmarks/gpu/collect.py /work/.device/1 /work/.device/2 /work/.device/3 --date 2026-12-04 --commit SHA
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.results_io import RESULTS  # noqa: E402  (AGENTSCALER_BENCH_RESULTS as every benchmark)

SMALL_MODEL = 2e8  # parameters: settings below this are the 135M shape the CPU anchor trains


def read_runs(dirs: list[Path]) -> list[dict[str, Any]]:
    """One entry per run folder: the device line and versions from its run log, and every result JSON
    (`zero2.json`, or `TAGzero2.json` for a run.sh call with TAG set)."""
    runs = []
    for d in dirs:
        log = "\n".join(p.read_text(errors="replace") for p in sorted(d.glob("*run.log"))).splitlines()
        device = log[1] if len(log) > 1 and log[0].startswith("name,") else ""  # nvidia-smi's CSV: header, then the GPU
        versions = next((line for line in log if line.startswith("torch ")), "")
        results = [json.loads(p.read_text()) for p in sorted(d.glob("*zero[23].json"))]
        runs.append({"folder": d.name, "device": device.strip(), "versions": versions.strip(), "results": results})
    return runs


def setting(r: dict[str, Any]) -> str:
    """What a result measured, read from the result itself (not from a file name)."""
    return (f"{r['parameters'] / 1e9:.2f}B, seq {r['seq_len']}, micro-batch {r['micro_batch']} x accumulation "
            f"{r['grad_accum']}, ZeRO-{r['zero']}")


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per setting (model, sequence, batch, ZeRO stage): medians over the runs that measured it."""
    by: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for r in run["results"]:
            by.setdefault(setting(r), []).append(r)
    out = {}
    for key, rs in sorted(by.items(), key=lambda kv: (-kv[1][0]["parameters"], kv[1][0]["micro_batch"], kv[1][0]["zero"])):
        out[key] = {"runs": len(rs), "parameters": rs[0]["parameters"], "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
                    "mfu": statistics.median(r["mfu"] for r in rs),
                    "median_step_s": statistics.median(r["median_step_s"] for r in rs),
                    "tokens_per_s_min": min(r["tokens_per_s"] for r in rs), "tokens_per_s_max": max(r["tokens_per_s"] for r in rs),
                    "peak_memory_gib": max(r["peak_memory_gib"] for r in rs),
                    "engagement_recorded": sum("zero_stage_engaged" in r for r in rs),
                    "zero_stage_engaged": sorted({r["zero_stage_engaged"] for r in rs if "zero_stage_engaged" in r}),
                    "zero_optimizer": sorted({r["zero_optimizer"] for r in rs if "zero_optimizer" in r})}
    return out


def median_table(med: dict[str, dict[str, Any]]) -> str:
    """The medians as a Markdown table (also the README's GPU block, benchmarks/run_all.py)."""
    lines = ["| setting | runs | tokens/s (median) | tokens/s (min-max) | median step (s) | MFU (median) | peak mem (GiB) "
             "| engaged (stage, optimizer) |", "|---|---|---|---|---|---|---|---|"]
    for key, m in med.items():
        engaged = (f"stage {', '.join(map(str, m['zero_stage_engaged']))}, {', '.join(m['zero_optimizer'])} "
                   f"(recorded in {m['engagement_recorded']} of {m['runs']} runs)") if m["zero_stage_engaged"] else "not recorded"
        lines.append(f"| {key} | {m['runs']} | {m['tokens_per_s']:.0f} | {m['tokens_per_s_min']:.0f}-{m['tokens_per_s_max']:.0f} "
                     f"| {m['median_step_s']:.3f} | {100 * m['mfu']:.1f}% | {m['peak_memory_gib']:.1f} | {engaged} |")
    return "\n".join(lines)


def cpu_anchor(path: Path) -> dict[str, Any]:
    """The CPU closed loop's own training speed, read from a scaling results file (TRL's tokens/s per point):
    quoted beside the GPU's, from another machine and another day, with real rows of varying length."""
    d = json.loads(path.read_text())
    per_point = {p["label"]: p["train"]["tokens_per_second"] for p in d["points"] if p.get("train", {}).get("tokens_per_second")}
    return {"source": f"benchmarks/results/{path.name}", "tokens_per_second": per_point,
            "median": statistics.median(per_point.values()), "config": {k: d["config"].get(k) for k in
            ("batch_size", "grad_accum", "session_length", "gradient_checkpointing", "torch_threads", "bf16")}}


def anchor_line(anchor: dict[str, Any], med: dict[str, dict[str, Any]]) -> str:
    """The quoted CPU figure and the 135M rows' ratios to it."""
    c = anchor["config"]
    ratios = "; ".join(f"{key}: {m['tokens_per_s'] / anchor['median']:,.0f}x" for key, m in med.items()
                       if m["parameters"] < SMALL_MODEL)
    return (f"CPU anchor (quoted from `{anchor['source']}`, not measured in this run: the closed loop's SmolLM2-135M "
            f"training on 2 CPU cores, micro-batch {c['batch_size']} x accumulation {c['grad_accum']}, rows up to "
            f"{c['session_length']} tokens, gradient checkpointing {'on' if c['gradient_checkpointing'] else 'off'}): "
            f"median {anchor['median']:.0f} tokens/s over its points "
            f"({', '.join(f'{k}: {v:.0f}' for k, v in anchor['tokens_per_second'].items())}). The 135M settings above "
            f"against it: {ratios or 'none measured'} (the GPU rows are full-length random rows without checkpointing, which "
            "recomputes the forward on the CPU: the ratio mixes the machine with those differences).")


def render(runs: list[dict[str, Any]], med: dict[str, dict[str, Any]], date: str, commit: str,
           anchor: dict[str, Any] | None = None) -> str:
    first = next(r for run in runs for r in run["results"])
    lines = [
        "# GPU: TRL SFT through accelerate + DeepSpeed ZeRO-2 / ZeRO-3 (benchmarks/gpu/)",
        "",
        f"Measured {date} on a lent GPU ({runs[0]['device']}), code at {commit}; {runs[0]['versions']}.",
        "Models built from benchmarks/gpu/model.json (a SmolLM2-1.7B-shaped Llama) and model_135m.json (the "
        "SmolLM2-135M shape the CPU closed loop trains), random weights; random token sequences of the length "
        f"given, loss on every token, bf16, no gradient checkpointing, {first['steps_timed']} timed optimizer steps "
        "after the warm-up. MFU = tokens/s x (6 N + 12 L d s) / (GPUs x "
        f"{first['peak_tflops_per_gpu']} TFLOP/s, the H200 datasheet's dense bf16); about 790 TFLOP/s (80% of it) "
        "is what a large bf16 matmul reaches on this device.",
        "One GPU: ZeRO shards over one process, so this measures the DeepSpeed engine on a real training "
        "step, not scaling across GPUs. The engaged column is read from the trainer after the run.",
        "",
        f"Medians per setting over the runs that measured it ({len(runs)} run folders):",
        "",
        median_table(med),
        "",
        *([anchor_line(anchor, med), ""] if anchor else []),
        "Each run:",
        "",
        "| run | setting | tokens/s | MFU | median step (s) | engaged |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        for r in run["results"]:
            engaged = (f"{r['engine']} stage {r['zero_stage_engaged']}" if "zero_stage_engaged" in r
                       else "not recorded (field added after this run)")
            lines.append(f"| {run['folder']} | {setting(r)} | {r['tokens_per_s']:.0f} | {100 * r['mfu']:.1f}% "
                         f"| {r['median_step_s']:.3f} | {engaged} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--date", required=True)
    ap.add_argument("--commit", required=True, help="the commit whose benchmarks/gpu/ ran")
    ap.add_argument("--cpu-anchor", type=Path, default=None, help="a scaling results JSON whose training tokens/s "
                    "to quote beside the 135M rows (e.g. benchmarks/results/scaling_20steps.json)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    runs = read_runs(args.dirs)
    med = medians(runs)
    anchor = cpu_anchor(args.cpu_anchor) if args.cpu_anchor else None
    (args.out / "gpu.json").write_text(json.dumps({"date": args.date, "commit": args.commit, "medians": med,
                                                   "cpu_anchor": anchor, "runs": runs}, indent=1))
    (args.out / "gpu.md").write_text(render(runs, med, args.date, args.commit, anchor))
    print((args.out / "gpu.md").read_text())


if __name__ == "__main__":
    main()
