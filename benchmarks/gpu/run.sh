#!/usr/bin/env bash
# TRL SFT throughput + MFU under DeepSpeed ZeRO-2 and ZeRO-3 on the device's own torch (see README.md).
# Run from the repository root on the GPU machine, after the carried wheels are on PYTHONPATH:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/gpu/run.sh
# Results: $OUT/zero2.json, $OUT/zero3.json, $OUT/summary.md, $OUT/run.log (OUT defaults to ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
GPUS=${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
STEPS=${STEPS:-30}
export PYTHONUNBUFFERED=1 DS_BUILD_OPS=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers, trl, deepspeed, accelerate; print("torch", torch.__version__, "transformers", transformers.__version__, "trl", trl.__version__, "deepspeed", deepspeed.__version__, "accelerate", accelerate.__version__)'
  for z in 2 3; do
    python3 benchmarks/gpu/sft_zero.py --zero $z --gpus "$GPUS" --accelerate-config-out "$OUT/acc-zero$z.yaml"
    timeout 240 python3 -m accelerate.commands.launch --config_file "$OUT/acc-zero$z.yaml" \
      benchmarks/gpu/sft_zero.py --zero $z --gpus "$GPUS" --steps "$STEPS" --out "$OUT/zero$z.json" \
      || echo "zero$z: exit $?"
  done
} 2>&1 | tee "$OUT/run.log"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = ["| ZeRO | GPUs | device | params | seq | micro-batch | tokens/s | tokens/s/GPU | median step (s) | MFU | peak mem (GiB) | engine (ZeRO stage engaged) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for z in (2, 3):
    p = out / f"zero{z}.json"
    if not p.exists():
        rows.append(f"| {z} | failed: see run.log | | | | | | | | | | |")
        continue
    r = json.loads(p.read_text())
    rows.append(f"| {z} | {r['gpus']} | {r['device']} | {r['parameters']/1e9:.2f}B | {r['seq_len']} | {r['micro_batch']} "
                f"| {r['tokens_per_s']:.0f} | {r['tokens_per_s_per_gpu']:.0f} | {r['median_step_s']:.3f} "
                f"| {100*r['mfu']:.1f}% | {r['peak_memory_gib']:.1f} | {r.get('engine')} ({r.get('zero_stage_engaged')}, {r.get('zero_optimizer')}) |")
(out / "summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PY
