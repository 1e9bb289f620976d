"""The per-stage SFT config (one YAML file per stage), loaded into a strict pydantic model.

`model` names where the weights come from:
- `tiny`          a tiny Llama built from `tiny` (tests, no download),
- `smollm2-135m`  SmolLM2-135M converted from the shipped GGUF (training/gguf_convert.py),
- `stage1`        the final output of stage 1 (`<ws>/models/stage1/final`): stage 2 continues it,
- anything else   a local HF checkpoint folder.
Relative `dataset_dir` / `output_dir` are resolved against the workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from training.tiny import TinyModelConfig


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stage: Literal[1, 2]
    model: str = "smollm2-135m"
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    dataset_dir: str | None = None  # default sft/stage{stage}/hf
    output_dir: str | None = None  # default models/stage{stage}
    max_length: int = 2048  # rows longer than this were dropped at export; never truncated here
    learning_rate: float = 2e-5
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    num_train_epochs: float = 2.0
    max_steps: int = -1  # > 0 overrides epochs
    per_device_train_batch_size: int = 1
    per_device_eval_batch_size: int = 1
    gradient_accumulation_steps: int = 8
    gradient_checkpointing: bool = False
    max_grad_norm: float = 1.0
    bf16: Literal["auto", True, False] = "auto"  # auto: bf16 on a GPU that supports it, fp32 on CPU
    logging_steps: int = 10
    save_steps: int = 500
    save_total_limit: int = 2
    eval_steps: int | None = None  # None: evaluate at the end only (see also eval_every_minutes)
    eval_every_minutes: float | None = None  # validation loss on the clock too (the curve of a budgeted run)
    eval_max_rows: int | None = None  # validate on the first N eval rows (export order: a hash) to keep it cheap
    budget_minutes: float | None = None  # stop training when this much wall time is spent (training/budget.py)
    packing: bool = False  # TRL best-fit-decreasing packing into max_length blocks (padding-free)
    padding_free: bool = False  # flatten a batch into one sequence (no pad tokens; block-diagonal attention)
    group_by_length: bool = False  # batches of similar length (less padding when batch size > 1)
    freeze_embeddings: bool = False  # no gradient for the token embedding (tied to the LM head in SmolLM2)
    train_top_layers: int | None = None  # train only the top N decoder layers (+ final norm): no backward below them
    seed: int = 42
    dataloader_num_workers: int = 0
    torch_threads: int | None = None  # None: torch's default; 1 is fastest on a small, shared CPU box

    def dataset_path(self, ws_root: Path) -> Path:
        return _resolve(ws_root, self.dataset_dir or f"sft/stage{self.stage}/hf")

    def output_path(self, ws_root: Path) -> Path:
        return _resolve(ws_root, self.output_dir or f"models/stage{self.stage}")


def _resolve(root: Path, p: str) -> Path:
    path = Path(p)
    return path if path.is_absolute() else Path(root) / path


def load_config(path: Path | str, **overrides) -> StageConfig:
    """Read a stage YAML; unknown keys are errors (a typo must not silently train with defaults)."""
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return StageConfig.model_validate(data)


CONFIG_DIR = Path(__file__).parent / "configs"


def default_config_path(stage: int) -> Path:
    return CONFIG_DIR / f"stage{stage}.yaml"
