"""Stage YAMLs and accelerate/DeepSpeed configs load and say what the docs say they do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from training.config import default_config_path, load_config

ACC = Path(__file__).resolve().parents[2] / "training" / "accelerate"


def test_stage_configs_load_and_reject_unknown_keys(tmp_path):
    s1, s2 = load_config(default_config_path(1)), load_config(default_config_path(2))
    assert (s1.stage, s2.stage, s2.model) == (1, 2, "stage1")
    assert s1.max_length > 0 and s2.dataset_path(tmp_path) == tmp_path / "sft/stage2/hf"
    bad = tmp_path / "bad.yaml"
    bad.write_text("stage: 1\nlearning_rat: 0.1\n")
    with pytest.raises(ValidationError, match="learning_rat"):
        load_config(bad)


@pytest.mark.parametrize("name,stage", [("zero2", 2), ("zero3", 3)])
def test_deepspeed_accelerate_configs(name, stage):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DeepSpeedPlugin, DistributedType
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    cfg = load_config_from_file(str(ACC / f"{name}.yaml"))
    assert cfg.distributed_type == DistributedType.DEEPSPEED and cfg.mixed_precision == "bf16"
    d = cfg.deepspeed_config
    assert d["gradient_accumulation_steps"] == load_config(default_config_path(1)).gradient_accumulation_steps
    plugin = DeepSpeedPlugin(zero_stage=d["zero_stage"], gradient_accumulation_steps=d["gradient_accumulation_steps"],
                             gradient_clipping=d["gradient_clipping"], offload_optimizer_device=d["offload_optimizer_device"],
                             offload_param_device=d["offload_param_device"], zero3_init_flag=d["zero3_init_flag"],
                             zero3_save_16bit_model=d.get("zero3_save_16bit_model", False))
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero["stage"] == stage
    assert zero["stage3_gather_16bit_weights_on_model_save"] is (stage == 3)
    parsed = DeepSpeedZeroConfig(**zero)  # DeepSpeed's own validation of the section
    assert int(parsed.stage) == stage and parsed.gather_16bit_weights_on_model_save is (stage == 3)


def test_cpu_accelerate_config():
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(ACC / "cpu.yaml"))
    assert cfg.use_cpu and cfg.num_processes == 1 and cfg.mixed_precision == "no"
    assert yaml.safe_load((ACC / "zero3.yaml").read_text())["deepspeed_config"]["zero3_save_16bit_model"] is True
