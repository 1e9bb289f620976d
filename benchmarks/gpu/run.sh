#!/usr/bin/env bash
# TRL SFT throughput + MFU under DeepSpeed ZeRO-2 and ZeRO-3 on the device's own torch (see README.md).
# Run from the repository root on the GPU machine, after the carried wheels are on PYTHONPATH:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/gpu/run.sh
# Results: $OUT/zero2.json, $OUT/zero3.json, $OUT/summary.md, $OUT/run.log (OUT defaults to ./gpu-out);
# with TAG=x the files are xzero2.json ... (e.g. TAG=135m- MODEL=benchmarks/gpu/model_135m.json SEQ=5120 BATCH=4 STAGES=2).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
GPUS=${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
STEPS=${STEPS:-30}
STAGES=${STAGES:-"2 3"}   # ZeRO stages to run
MODEL=${MODEL:-benchmarks/gpu/model.json}   # model_135m.json: the shape the CPU closed loop trains
SEQ=${SEQ:-2048}
BATCH=${BATCH:-8}
GRAD_ACCUM=${GRAD_ACCUM:-1}
TAG=${TAG:-}   # prefix of the result files (a second model's results beside the first's)
export PYTHONUNBUFFERED=1 DS_BUILD_OPS=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers, trl, deepspeed, accelerate; print("torch", torch.__version__, "transformers", transformers.__version__, "trl", trl.__version__, "deepspeed", deepspeed.__version__, "accelerate", accelerate.__version__)'
  for z in $STAGES; do
    python3 benchmarks/gpu/sft_zero.py --zero $z --gpus "$GPUS" --grad-accum "$GRAD_ACCUM" --accelerate-config-out "$OUT/acc-zero$z.yaml"
    timeout 240 python3 -m accelerate.commands.launch --config_file "$OUT/acc-zero$z.yaml" \
      benchmarks/gpu/sft_zero.py --zero $z --gpus "$GPUS" --steps "$STEPS" --model-config "$MODEL" \
      --seq-len "$SEQ" --batch "$BATCH" --grad-accum "$GRAD_ACCUM" --out "$OUT/${TAG}zero$z.json" \
      || echo "${TAG}zero$z: exit $?"
  done
} 2>&1 | tee "$OUT/${TAG}run.log"
python3 - "$OUT" "$TAG" $STAGES <<'PY'
import json, sys
from pathlib import Path
out, tag, stages = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
rows = ["| ZeRO | GPUs | device | params | seq | micro-batch | tokens/s | tokens/s/GPU | median step (s) | MFU | peak mem (GiB) | engine (ZeRO stage engaged) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for z in stages:
    p = out / f"{tag}zero{z}.json"
    if not p.exists():
        rows.append(f"| {z} | failed: see run.log | | | | | | | | | | |")
        continue
    r = json.loads(p.read_text())
    rows.append(f"| {z} | {r['gpus']} | {r['device']} | {r['parameters']/1e9:.2f}B | {r['seq_len']} | {r['micro_batch']} "
                f"| {r['tokens_per_s']:.0f} | {r['tokens_per_s_per_gpu']:.0f} | {r['median_step_s']:.3f} "
                f"| {100*r['mfu']:.1f}% | {r['peak_memory_gib']:.1f} | {r.get('engine')} ({r.get('zero_stage_engaged')}, {r.get('zero_optimizer')}) |")
(out / f"{tag}summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PY
