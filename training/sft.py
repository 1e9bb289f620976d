"""SFT entry point for one stage: TRL SFTTrainer with assistant-only loss.

    python -m training.sft --config training/configs/stage1.yaml --workspace WS [--max-steps N]
    accelerate launch --config_file training/accelerate/zero3.yaml -m training.sft --config ... --workspace WS

Stage 2 uses `model: stage1`, i.e. it starts from `<ws>/models/stage1/final`. Checkpoints,
`train.log` (written by tasks/sft/train.py), `result.json` and the final model (`final/`) go to
`<ws>/models/stage{n}/`. The run is always its own process (never inside Prefect's).

`budget_minutes` sizes a run by wall time (training/budget.py: stop at the budget, learning rate
on the clock); the validation loss (the export's eval split: scenarios never trained on) is
measured every `eval_steps` and/or `eval_every_minutes` and at the end, and `result.json` holds
both curves (`curve`), the measured tokens per second and why the run stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from agentscaler.hashing import content_hash
from agentscaler.workspace import atomic_write_json
from training.budget import BudgetClock, budget_callback, curve
from training.chat_template import apply_template
from training.config import StageConfig, load_config
from training.gguf_convert import convert_smollm2, load_tokenizer
from training.resume import prior_seconds, remove_checkpoints, resume_point, seconds_saver
from training.tiny import build_tiny_model

TRAIN_COLUMNS = ["messages", "tools"]


def load_model_and_tokenizer(cfg: StageConfig, ws_root: Path) -> tuple[Any, Any, str]:
    """(model, tokenizer, description of where the weights came from)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # the [train] extra: heavy, loaded on use

    if cfg.model == "tiny":
        tok = load_tokenizer()
        return build_tiny_model(tok, cfg.tiny), tok, f"tiny(seed={cfg.tiny.seed})"
    if cfg.model == "smollm2-135m":
        path = convert_smollm2()
    elif cfg.model == "stage1":
        path = ws_root / "models" / "stage1" / "final"
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"stage 2 starts from stage 1, but {path} has no model: train stage 1 first")
    else:
        path = Path(cfg.model)
        if not path.is_absolute():
            path = ws_root / path
    tok = apply_template(AutoTokenizer.from_pretrained(str(path)))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype="float32")
    return model, tok, str(path)


def load_datasets(cfg: StageConfig, ws_root: Path) -> tuple[Any, Any | None, dict[str, int]]:
    """Train/eval splits from the export; rows over max_length are dropped (never truncated)."""
    from datasets import load_from_disk  # the [train] extra: heavy, loaded on use

    path = cfg.dataset_path(ws_root)
    if not path.exists():
        raise FileNotFoundError(f"no SFT dataset at {path}: run `agentscaler export --stage {cfg.stage}` first")
    dd = load_from_disk(str(path))
    counts: dict[str, int] = {}
    out = {}
    for split in ("train", "eval"):
        if split not in dd:
            continue
        ds = dd[split]
        keep = ds.filter(lambda n: n <= cfg.max_length, input_columns="n_tokens")
        counts[f"{split}_rows"] = len(keep)
        counts[f"{split}_too_long"] = len(ds) - len(keep)
        counts[f"{split}_tokens"] = int(sum(keep["n_tokens"])) if len(keep) else 0
        out[split] = keep.select_columns(TRAIN_COLUMNS)
    if not out.get("train") or len(out["train"]) == 0:
        raise ValueError(f"{path}: the train split is empty (nothing verified for stage {cfg.stage}?)")
    ev = out.get("eval")
    if ev is not None and cfg.eval_max_rows is not None and len(ev) > cfg.eval_max_rows:
        ev = ev.select(range(cfg.eval_max_rows))  # rows are in id (hash) order: a fixed, unbiased subset
    counts["eval_rows_used"] = len(ev) if ev is not None else 0
    return out["train"], (ev if ev is not None and len(ev) else None), counts


def weight_fingerprint(model: Any) -> str:
    """Hash of the first few elements of every tensor: cheap check of which weights a run started from."""
    import torch  # the [train] extra: heavy, loaded on use

    with torch.no_grad():
        parts = [p.detach().flatten()[:8].float().tolist() for p in model.parameters()]
    return content_hash([[round(x, 6) for x in p] for p in parts])


PROGRESS = "progress: step {step}/{total}"  # one line per optimizer step; tasks/sft/train.py reads it
# On CPU one optimizer step can take minutes (many accumulated micro-batches): a line per micro-batch
# too, so a person sees a working run move before the first step ends.
MICRO = "progress: step {step}/{total} micro-batch {micro}/{accum}"


def _step_timer() -> Any:
    """A callback recording each optimizer step's wall time (for medians in benchmarks/bench_train.py)
    and printing a progress line per step (the command line shows it: agentscaler.progress)."""
    from transformers import TrainerCallback  # the [train] extra: heavy, loaded on use

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._t = 0.0

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            self._micro = 0
            if state.is_world_process_zero:
                print(PROGRESS.format(step=state.global_step, total=state.max_steps), flush=True)

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self._t = time.perf_counter()
            self._micro = 0

        def on_substep_end(self, args, state, control, **kw):  # noqa: ANN001
            self._micro += 1
            if state.is_world_process_zero:
                print(MICRO.format(step=state.global_step, total=state.max_steps, micro=self._micro,
                                   accum=args.gradient_accumulation_steps), flush=True)

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            self.seconds.append(time.perf_counter() - self._t)
            if state.is_world_process_zero:
                print(PROGRESS.format(step=state.global_step, total=state.max_steps), flush=True)

    return StepTimer()


def optimizer_steps(cfg: StageConfig, train_rows: int, max_steps: int | None = None, world_size: int = 1) -> int:
    """Optimizer steps the trainer will take: max_steps when set, else epochs x updates per epoch
    (as transformers' Trainer counts them: batches per process, floor-divided by accumulation)."""
    steps = max_steps if max_steps is not None else cfg.max_steps
    if steps and steps > 0:
        return steps
    batches = math.ceil(train_rows / (cfg.per_device_train_batch_size * max(1, world_size)))
    per_epoch = max(1, batches // cfg.gradient_accumulation_steps)
    return math.ceil(cfg.num_train_epochs * per_epoch)


def warmup_steps(cfg: StageConfig, train_rows: int, max_steps: int | None = None, world_size: int = 1) -> int:
    """warmup_ratio of the optimizer steps, as a whole number of steps. `warmup_steps` takes a ratio
    only in some transformers versions (a float below 1) and `warmup_ratio` is deprecated in others,
    so the steps are computed here: every allowed version warms up the same."""
    return math.ceil(cfg.warmup_ratio * optimizer_steps(cfg, train_rows, max_steps, world_size))


def sft_args(cfg: StageConfig, out_dir: Path, max_steps: int | None, has_eval: bool, train_rows: int = 0) -> Any:
    import torch  # the [train] extra: heavy, loaded on use
    from trl import SFTConfig

    bf16 = cfg.bf16 if cfg.bf16 != "auto" else bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    steps = max_steps if max_steps is not None else cfg.max_steps
    if cfg.budget_minutes and steps <= 0:
        steps = 10**6  # the budget decides (or the epochs: num_train_epochs still bounds the run)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
    return SFTConfig(
        output_dir=str(out_dir),
        assistant_only_loss=True,
        # rows over max_length were dropped in load_datasets; padding-free without packing wants None here
        max_length=None if (cfg.padding_free and not cfg.packing) else cfg.max_length,
        packing=cfg.packing,
        padding_free=cfg.padding_free,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=warmup_steps(cfg, train_rows, max_steps, world),
        weight_decay=cfg.weight_decay,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=steps,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        activation_checkpointing=cfg.gradient_checkpointing,
        max_grad_norm=cfg.max_grad_norm,
        bf16=bf16,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        eval_strategy="steps" if (has_eval and cfg.eval_steps) else "no",
        eval_steps=cfg.eval_steps,
        seed=cfg.seed,
        dataloader_num_workers=cfg.dataloader_num_workers,
        report_to=[],
        # tqdm writes "\r" without a newline, so its bar prefixed our progress lines and the parent,
        # which reads lines, saw no step until the stage ended: our per-step lines are the progress.
        disable_tqdm=True,
        # No CUDA: say CPU, so processes started by `accelerate launch --num_processes N` (torchrun)
        # join one gloo process group instead of each training alone.
        use_cpu=not torch.cuda.is_available(),
        dataset_num_proc=None,
    )


def trainer_class(cfg: StageConfig, clock: BudgetClock) -> Any:
    """TRL's SFTTrainer, or (with a budget) one whose learning rate follows the clock (training/budget.py)."""
    from torch.optim.lr_scheduler import LambdaLR  # the [train] extra: heavy, loaded on use
    from trl import SFTTrainer

    if not cfg.budget_minutes:
        return SFTTrainer

    class BudgetSFTTrainer(SFTTrainer):
        def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
            if self.lr_scheduler is None:
                self.lr_scheduler = LambdaLR(optimizer or self.optimizer,
                                             lambda _step: clock.lr_multiplier(cfg.lr_scheduler_type, cfg.warmup_ratio))
            return self.lr_scheduler

    return BudgetSFTTrainer


def freeze_embeddings(model: Any) -> int:
    """Stop the token embedding's gradient (tied to the LM head in SmolLM2, so both stay); returns its size."""
    weight = model.get_input_embeddings().weight
    weight.requires_grad_(False)
    return int(weight.numel())


def train_top_layers(model: Any, n: int) -> int:
    """Train only the top `n` decoder layers and the final norm (an untied LM head too); everything
    below gets no gradient, so backward stops at the lowest trained layer. Returns the frozen size."""
    layers = model.get_decoder().layers
    if not 1 <= n <= len(layers):
        raise ValueError(f"train_top_layers={n}: the model has {len(layers)} decoder layers")
    for p in model.parameters():
        p.requires_grad_(False)
    keep = [*layers[len(layers) - n:], model.get_decoder().norm]
    head = model.get_output_embeddings()
    if head is not None and head.weight is not model.get_input_embeddings().weight:
        keep.append(head)
    for module in keep:
        for p in module.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if not p.requires_grad)


def run(cfg: StageConfig, ws_root: Path, max_steps: int | None = None, resume_key: str | None = None) -> dict[str, Any]:
    """Train one stage and write `<out>/final/` and `<out>/result.json`; returns the result.
    `resume_key` (training/resume.py): continue from the last checkpoint of an interrupted run with
    the same key, and remove the checkpoints once the run is done (final/ holds the model)."""
    from datasets.utils.logging import disable_progress_bar  # the [train] extra: heavy, loaded on use

    disable_progress_bar()
    if cfg.torch_threads:
        import torch  # the [train] extra: heavy, loaded on use

        torch.set_num_threads(cfg.torch_threads)
    ws_root = Path(ws_root).resolve()
    out_dir = cfg.output_path(ws_root)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_ds, eval_ds, counts = load_datasets(cfg, ws_root)
    # The training arguments exist before the model is built so that, under accelerate + ZeRO-3
    # (zero3_init_flag), transformers builds the model already partitioned (deepspeed.zero.Init).
    args = sft_args(cfg, out_dir, max_steps, eval_ds is not None, train_rows=len(train_ds))
    model, tok, source = load_model_and_tokenizer(cfg, ws_root)
    start_fp = weight_fingerprint(model)
    frozen = freeze_embeddings(model) if cfg.freeze_embeddings else 0
    if cfg.train_top_layers:
        frozen = train_top_layers(model, cfg.train_top_layers)
    timer = _step_timer()
    start_at = resume_point(out_dir, resume_key, budgeted=bool(cfg.budget_minutes))
    before = prior_seconds(start_at)
    if start_at is not None:
        print(f"resuming from {start_at.name} (an interrupted run with the same resume key)", flush=True)
    clock = BudgetClock(cfg.budget_minutes * 60 if cfg.budget_minutes else None)
    eval_every = cfg.eval_every_minutes * 60 if (cfg.eval_every_minutes and eval_ds is not None) else None
    budget = budget_callback(clock, eval_every)
    trainer = trainer_class(cfg, clock)(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                                        processing_class=tok,
                                        callbacks=[timer, budget, *([seconds_saver(timer, before)] if resume_key else [])])
    n_train_tokens = sum(len(x) for x in trainer.train_dataset["input_ids"])
    n_loss_tokens = _loss_tokens(trainer.train_dataset)
    t0 = time.perf_counter()
    out = trainer.train(resume_from_checkpoint=str(start_at) if start_at is not None else None)
    train_s = time.perf_counter() - t0 + sum(before)
    eval_metrics = trainer.evaluate() if eval_ds is not None else {}
    final = out_dir / "final"
    # Every rank calls save_model: under ZeRO-3 it gathers the 16-bit weights (a collective,
    # zero3_save_16bit_model) and only the main process writes.
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        tok.save_pretrained(str(final))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    steps = trainer.state.global_step
    tokens_per_step = cfg.gradient_accumulation_steps * cfg.per_device_train_batch_size * (
        n_train_tokens / max(1, len(trainer.train_dataset))) * max(1, trainer.args.world_size)
    # TRL counts the tokens it trained on (num_tokens, cumulative); the mean row length x rows per step otherwise
    counted = [h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h]
    seen_tokens = resumed_total(counted) if counted else steps * tokens_per_step
    max_steps_set = args.max_steps
    stopped_by = ("budget" if budget.stopped_by_budget else "max_steps" if steps >= max_steps_set > 0 else "epochs")
    result = {
        "stage": cfg.stage, "model_source": source, "start_fingerprint": start_fp,
        "end_fingerprint": weight_fingerprint(trainer.model), "global_step": steps,
        "train_loss": out.training_loss, "losses": losses, "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "loss_finite": all(math.isfinite(x) for x in losses) and math.isfinite(out.training_loss),
        "eval": eval_metrics, "train_seconds": train_s, "tokens_seen": seen_tokens,
        "tokens_per_second": seen_tokens / train_s if train_s > 0 else None,
        "curve": curve(trainer.state.log_history), "stopped_by": stopped_by,
        "final_learning_rate": float(trainer.lr_scheduler.get_last_lr()[0]) if trainer.lr_scheduler else None,
        "budget_minutes": cfg.budget_minutes, "frozen_parameters": frozen,
        "epochs": trainer.state.epoch,
        "tokens_per_step": tokens_per_step, "step_seconds": [*before, *timer.seconds],
        "resumed_from": start_at.name if start_at is not None else None,
        "dataset": counts, "train_tokens": n_train_tokens, "loss_tokens": n_loss_tokens,
        "output_dir": str(out_dir), "final_dir": str(final), "config": cfg.model_dump(),
        "world_size": trainer.args.world_size,
    }
    if trainer.is_world_process_zero():
        atomic_write_json(out_dir / "result.json", result)
        if resume_key is not None:
            remove_checkpoints(out_dir)  # done: final/ holds the model (a checkpoint adds the optimizer's state: 3x its size)
    return result


def resumed_total(counts: list[float]) -> float:
    """The last of TRL's cumulative token counts, over a resume: the restored history holds the counts
    up to the checkpoint, and the resumed process counts again from zero."""
    total, prev = 0.0, 0.0
    for c in map(float, counts):
        if c < prev:
            total += prev
        prev = c
    return total + prev


def _loss_tokens(ds: Any) -> int:
    """Tokens that carry loss (assistant tokens): TRL's assistant_masks, or labels != -100."""
    col = "assistant_masks" if "assistant_masks" in ds.column_names else "labels"
    if col == "labels":
        return sum(sum(1 for t in x if t != -100) for x in ds[col])
    return sum(sum(x) for x in ds[col])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Two-stage SFT: train one stage.")
    ap.add_argument("--config", required=True, help="stage YAML (training/configs/stage1.yaml)")
    ap.add_argument("--workspace", default=os.environ.get("AGENTSCALER_WORKSPACE", "workspace"))
    ap.add_argument("--max-steps", type=int, default=None, help="override the config's max_steps")
    ap.add_argument("--model", default=None, help="override the config's model")
    ap.add_argument("--output-dir", default=None, help="override the config's output_dir")
    ap.add_argument("--budget-minutes", type=float, default=None, help="stop after this much wall time")
    ap.add_argument("--save-steps", type=int, default=None, help="override the config's save_steps")
    ap.add_argument("--resume-key", default=None, help="continue an interrupted run with this key from its last "
                    "checkpoint (training/resume.py); checkpoints of another key are removed")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    cfg = load_config(args.config, model=args.model, output_dir=args.output_dir, budget_minutes=args.budget_minutes,
                      save_steps=args.save_steps)
    result = run(cfg, Path(args.workspace), max_steps=args.max_steps, resume_key=args.resume_key)
    print("RESULT " + json.dumps({k: result[k] for k in ("stage", "global_step", "train_loss", "final_dir")}),
          flush=True)


if __name__ == "__main__":
    main()
