"""TRL SFT throughput and MFU on a GPU, through accelerate + DeepSpeed ZeRO-2 or ZeRO-3 (see README.md here).

Measured on a lent H200: benchmarks/results/gpu.md (collect.py records run.sh's results there).

The model is built from `model.json` in this folder (a SmolLM2-1.7B-shaped Llama, random weights:
throughput and MFU do not depend on the weights), the data are random token sequences of a fixed
length (loss on every token), and the tokenizer is a word-level one built in code (nothing is
downloaded, nothing but wheels travels). The same TRL SFTTrainer as training/sft.py does the steps.

    # one ZeRO stage, inside accelerate (run.sh writes the accelerate config and launches this):
    accelerate launch --config_file ACC.yaml benchmarks/gpu/sft_zero.py --zero 2 --out zero2.json
    # argument parsing, configs and FLOP counts only (no GPU, no weights: the model is built on `meta`):
    python benchmarks/gpu/sft_zero.py --zero 3 --dry-run

Reported (rank 0, JSON): steady-state tokens/s over the timed steps (after `--warmup` steps), step
time median, peak GPU memory, and MFU = achieved model FLOP/s / (GPUs x peak). Model FLOPs per
token = 6 N + 12 L d s (N parameters, the tied LM head counted once as the matmul it is; L layers,
d hidden size, s sequence length: the attention term of the PaLM/Megatron convention, no causal
discount, no recomputation counted), so MFU here is comparable with published MFU figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
H200_BF16_DENSE_TFLOPS = 989.5  # NVIDIA's H200 SXM datasheet, dense bf16 (no sparsity)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero", type=int, choices=(2, 3), required=True)
    ap.add_argument("--model-config", default=str(HERE / "model.json"))
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8, help="micro-batch per GPU")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps in all (warm-up included)")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS, help="per GPU, bf16 dense")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--out", default=None, help="JSON result (rank 0)")
    ap.add_argument("--accelerate-config-out", default=None, help="write the accelerate YAML for this stage and exit")
    ap.add_argument("--dry-run", action="store_true", help="configs and FLOPs only: no GPU, no training")
    args = ap.parse_args(argv)
    if args.warmup >= args.steps:
        ap.error("--warmup must be smaller than --steps")
    return args


def model_config(path: str) -> Any:
    from transformers import LlamaConfig

    data = json.loads(Path(path).read_text())
    data.pop("_comment", None)
    return LlamaConfig(**data)


def accelerate_config(zero: int, gpus: int, grad_accum: int) -> dict[str, Any]:
    """training/accelerate/zero{2,3}.yaml (the repository's configs) with this run's GPUs and accumulation."""
    cfg = yaml.safe_load((ROOT / "training" / "accelerate" / f"zero{zero}.yaml").read_text())
    cfg["num_processes"] = gpus
    cfg["deepspeed_config"]["gradient_accumulation_steps"] = grad_accum
    return cfg


def count_parameters(config: Any) -> int:
    """Parameters of the model built from `config`, counted on the meta device (no memory)."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return sum(p.numel() for p in model.parameters())  # tied embedding / LM head counted once


def flops_per_token(n_params: int, config: Any, seq_len: int) -> float:
    return 6.0 * n_params + 12.0 * config.num_hidden_layers * config.hidden_size * seq_len


def sft_config(args: argparse.Namespace, out_dir: str, dry: bool = False) -> Any:
    """TRL's config for the run; `dry` builds it on a machine without a GPU (bf16 then needs use_cpu)."""
    from trl import SFTConfig

    return SFTConfig(output_dir=out_dir, use_cpu=dry, max_length=args.seq_len, per_device_train_batch_size=args.batch,
                     gradient_accumulation_steps=args.grad_accum, max_steps=args.steps, learning_rate=1e-5,
                     lr_scheduler_type="constant", warmup_steps=0, bf16=True, logging_steps=1,
                     save_strategy="no", report_to=[], gradient_checkpointing=args.gradient_checkpointing,
                     dataloader_num_workers=2, packing=False, dataset_num_proc=None, seed=0)


def word_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer over the model's vocabulary ids (the data are token ids already)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")))
    tok.pad_token, tok.eos_token, tok.bos_token = "t2", "t2", "t1"
    return tok


def random_dataset(rows: int, seq_len: int, vocab_size: int, seed: int = 0) -> Any:
    import numpy as np
    from datasets import Dataset

    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, size=(rows, seq_len), dtype=np.int64)
    return Dataset.from_dict({"input_ids": ids.tolist()})


def step_timer() -> Any:
    import torch
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._t = 0.0

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            torch.cuda.synchronize()
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            torch.cuda.synchronize()
            self.seconds.append(time.perf_counter() - self._t)

    return Timer()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM
    from trl import SFTTrainer

    config = model_config(args.model_config)
    n_params = count_parameters(config)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    sft = sft_config(args, str(Path(args.out or "/tmp/sft_zero").with_suffix("")) + "-run")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)  # after SFTConfig: under ZeRO-3 (zero3_init_flag) it is built partitioned
    rows = args.steps * args.batch * args.grad_accum * world + 8
    timer = step_timer()
    trainer = SFTTrainer(model=model, args=sft, train_dataset=random_dataset(rows, args.seq_len, config.vocab_size),
                         processing_class=word_tokenizer(config.vocab_size), callbacks=[timer])
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    engine = trainer.model_wrapped  # DeepSpeedEngine when accelerate engaged DeepSpeed: recorded as evidence
    zero_engaged = engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None
    timed = timer.seconds[args.warmup:]
    tokens_per_step = args.batch * args.grad_accum * args.seq_len * world
    tok_s = tokens_per_step * len(timed) / sum(timed)
    fpt = flops_per_token(n_params, config, args.seq_len)
    return {"zero": args.zero, "gpus": world, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "parameters": n_params, "seq_len": args.seq_len, "micro_batch": args.batch, "grad_accum": args.grad_accum,
            "gradient_checkpointing": args.gradient_checkpointing, "steps_timed": len(timed),
            "median_step_s": statistics.median(timed), "tokens_per_s": tok_s,
            "tokens_per_s_per_gpu": tok_s / world, "model_flops_per_token": fpt,
            "mfu": tok_s * fpt / (world * args.peak_tflops * 1e12), "peak_tflops_per_gpu": args.peak_tflops,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
            "first_loss": next((h["loss"] for h in trainer.state.log_history if "loss" in h), None),
            "deepspeed_enabled": bool(trainer.is_deepspeed_enabled), "engine": type(engine).__name__,
            "zero_stage_engaged": zero_engaged, "zero_optimizer": type(getattr(engine, "optimizer", None)).__name__}


def dry_run(args: argparse.Namespace) -> dict[str, Any]:
    config = model_config(args.model_config)
    n_params = count_parameters(config)
    sft = sft_config(args, "/tmp/sft_zero-dry", dry=True)
    acc = accelerate_config(args.zero, args.gpus, args.grad_accum)
    return {"zero": args.zero, "parameters": n_params, "model_flops_per_token": flops_per_token(n_params, config, args.seq_len),
            "tokens_per_step": args.batch * args.grad_accum * args.seq_len * args.gpus,
            "accelerate": {"zero_stage": acc["deepspeed_config"]["zero_stage"], "num_processes": acc["num_processes"],
                           "mixed_precision": acc["mixed_precision"],
                           "gradient_accumulation_steps": acc["deepspeed_config"]["gradient_accumulation_steps"]},
            "sft": {"max_steps": sft.max_steps, "bf16": sft.bf16, "per_device_train_batch_size": sft.per_device_train_batch_size,
                    "gradient_accumulation_steps": sft.gradient_accumulation_steps, "max_length": sft.max_length},
            "measured": False}


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.accelerate_config_out:
        Path(args.accelerate_config_out).write_text(yaml.safe_dump(accelerate_config(args.zero, args.gpus, args.grad_accum)))
        return
    result = dry_run(args) if args.dry_run else run(args)
    if int(os.environ.get("RANK", "0")) == 0:
        text = json.dumps(result, indent=1)
        print("RESULT " + json.dumps(result), flush=True)
        if args.out:
            Path(args.out).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
