#!/usr/bin/env bash
# The Python packages the GPU benchmark needs that the device image lacks, as wheels for its Python
# (3.12, manylinux x86-64), into benchmarks/gpu/wheels/ (git-ignored; `carry` it to the device).
# The image holds torch, transformers, accelerate, pyarrow, pandas, tokenizers, safetensors, xxhash,
# psutil, msgpack, ninja, einops, py-cpuinfo (/work/.library/device/KINDS.md); TRL, datasets and
# DeepSpeed (and DeepSpeed's pydantic) are carried. DeepSpeed ships only a source archive: it is built
# here into a pure-Python wheel with no compiled ops (DS_BUILD_OPS=0; its kernels JIT-compile on the GPU).
# Run from the repository root with the project's venv: bash benchmarks/gpu/fetch_wheels.sh
set -euo pipefail
DST=benchmarks/gpu/wheels
PY=${PY:-.venv/bin/python}
mkdir -p "$DST"
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
$PY -m pip download -q --no-deps $PLAT -d "$DST" \
  trl==1.16.0 datasets==5.2.0 "dill==0.4.1" "multiprocess==0.70.19" hjson==3.1.0 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
if [ "${FETCH_PYARROW:-0}" = 1 ]; then  # only if the device's pyarrow is older than datasets needs (>= 24)
  $PY -m pip download -q --no-deps $PLAT -d "$DST" "pyarrow>=24"
fi
ls "$DST"/deepspeed-*.whl >/dev/null 2>&1 || DS_BUILD_OPS=0 $PY -m pip wheel -q --no-deps --no-build-isolation -w "$DST" deepspeed==0.19.8
du -ch "$DST"/*.whl | tail -1
