"""The GPU benchmark's parts that need no GPU: argument parsing, the accelerate/DeepSpeed configs it
writes (validated by DeepSpeed's own config model), the parameter count on the meta device and the
FLOP arithmetic of MFU. (The benchmark itself runs only on a GPU: benchmarks/results/gpu.md has its figures.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("sft_zero", ROOT / "benchmarks" / "gpu" / "sft_zero.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.mark.parametrize("zero", [2, 3])
def test_dry_run_builds_configs_and_counts(zero, tmp_path):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from accelerate.utils import DeepSpeedPlugin

    m = _module()
    args = m.parse(["--zero", str(zero), "--gpus", "2", "--grad-accum", "3", "--dry-run"])
    out = m.dry_run(args)
    assert out["measured"] is False and out["accelerate"] == {"zero_stage": zero, "num_processes": 2,
                                                              "mixed_precision": "bf16", "gradient_accumulation_steps": 3}
    assert out["sft"]["gradient_accumulation_steps"] == 3 and out["sft"]["bf16"] is True
    cfg = m.model_config(args.model_config)
    n = out["parameters"]
    # a tied Llama: embedding once, per layer 4 d^2 attention + 3 d f MLP + 2 norms, the final norm
    d, f, L, v = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    assert n == v * d + L * (4 * d * d + 3 * d * f + 2 * d) + d
    assert out["model_flops_per_token"] == 6 * n + 12 * L * d * 2048
    assert out["tokens_per_step"] == 8 * 3 * 2048 * 2
    path = tmp_path / "acc.yaml"
    m.main(["--zero", str(zero), "--gpus", "2", "--grad-accum", "3", "--accelerate-config-out", str(path)])
    acc = yaml.safe_load(path.read_text())
    ds = acc["deepspeed_config"]
    plugin = DeepSpeedPlugin(zero_stage=ds["zero_stage"], gradient_accumulation_steps=ds["gradient_accumulation_steps"],
                             zero3_init_flag=ds["zero3_init_flag"])
    assert int(DeepSpeedZeroConfig(**plugin.deepspeed_config["zero_optimization"]).stage) == zero


def test_bad_arguments_are_refused():
    m = _module()
    with pytest.raises(SystemExit):
        m.parse(["--zero", "1", "--dry-run"])
    with pytest.raises(SystemExit):
        m.parse(["--zero", "2", "--steps", "5", "--warmup", "5"])
