"""Warmup is a number of steps computed from the stage's warmup_ratio (issue 17): transformers
reads `warmup_steps` as a ratio in some major versions and as steps in others, so the trainer gets
whole steps, and the step count it is computed from is the one the real Trainer takes."""

from __future__ import annotations

import math

from datasets import Dataset

from training.config import StageConfig
from training.sft import optimizer_steps, sft_args, warmup_steps
from training.tiny import TinyModelConfig, build_tiny_model


def test_warmup_steps_from_the_ratio(tmp_path):
    cfg = StageConfig(stage=1, model="tiny", warmup_ratio=0.1, num_train_epochs=2, per_device_train_batch_size=2,
                      gradient_accumulation_steps=4)
    assert optimizer_steps(cfg, 100) == 2 * (50 // 4) == 24  # 50 batches per epoch, 12 updates per epoch
    assert warmup_steps(cfg, 100) == math.ceil(0.1 * 24) == 3
    assert warmup_steps(cfg, 100, max_steps=50) == 5  # a step cap replaces epochs
    assert warmup_steps(cfg, 100, world_size=2) == math.ceil(0.1 * 2 * (25 // 4))
    assert warmup_steps(cfg.model_copy(update={"warmup_ratio": 0.0}), 100) == 0
    args = sft_args(cfg, tmp_path, None, False, train_rows=100)
    assert args.warmup_steps == 3 and isinstance(args.warmup_steps, int)
    assert args.get_warmup_steps(24) == 3


def test_the_step_count_is_the_trainers(tokenizer, tmp_path):
    """The real SFTTrainer on the tiny model: its updates per epoch equal ours."""
    from trl import SFTTrainer

    cfg = StageConfig(stage=1, model="tiny", warmup_ratio=0.5, num_train_epochs=3, per_device_train_batch_size=2,
                      gradient_accumulation_steps=2, max_length=256)
    rows = Dataset.from_list([{"messages": [{"role": "user", "content": f"hi {i}"},
                                            {"role": "assistant", "content": f"hello {i}"}]} for i in range(11)])
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1))
    trainer = SFTTrainer(model=model, args=sft_args(cfg, tmp_path, None, False, train_rows=len(rows)),
                         train_dataset=rows, processing_class=tokenizer)
    per_epoch = max(1, len(trainer.get_train_dataloader()) // cfg.gradient_accumulation_steps)
    assert optimizer_steps(cfg, len(rows)) == math.ceil(cfg.num_train_epochs * per_epoch) == 9
    assert trainer.args.warmup_steps == math.ceil(0.5 * 9) == 5
