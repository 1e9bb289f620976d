"""Training sized by time (training/budget.py): the clock's arithmetic on a fake clock, then a real
TRL run of the tiny model that stops at its budget, validates on the clock and records both curves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from training.budget import BudgetClock, curve


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_clock_warmup_then_shape_on_the_remaining_time():
    now = FakeTime()
    clock = BudgetClock(budget_s=100.0, now=now)
    clock.start()
    assert clock.lr_multiplier("cosine", 0.1) == 0.01  # warmup floor at t = 0
    now.t += 5
    assert clock.lr_multiplier("cosine", 0.1) == pytest.approx(0.5)
    now.t += 5  # end of warmup
    assert clock.lr_multiplier("cosine", 0.1) == pytest.approx(1.0)
    assert clock.lr_multiplier("linear", 0.1) == pytest.approx(1.0)
    now.t += 45  # half of the remaining 90 s
    assert clock.lr_multiplier("cosine", 0.1) == pytest.approx(0.5)
    assert clock.lr_multiplier("linear", 0.1) == pytest.approx(0.5)
    assert clock.lr_multiplier("constant", 0.1) == 1.0
    assert not clock.spent()
    now.t += 45
    assert clock.spent() and clock.lr_multiplier("cosine", 0.1) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        clock.lr_multiplier("polynomial", 0.0)
    with pytest.raises(ValueError):
        BudgetClock(None).lr_multiplier("cosine", 0.0)
    assert not BudgetClock(None).spent()


def test_stop_leaves_the_schedule_at_the_spent_budget():
    """The Trainer steps the scheduler a moment before the callback sees the budget spent (CI once saw
    1.7e-6 left): on stopping, the callback steps it again, so a linear schedule ends at exactly 0.
    A real torch scheduler and optimizer on one parameter; only the clock is fake."""
    import torch
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from training.budget import budget_callback

    now = FakeTime()
    clock = BudgetClock(budget_s=3.0, now=now)
    clock.start()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    sched = LambdaLR(opt, lambda _step: clock.lr_multiplier("linear", 0.0))
    cb = budget_callback(clock)
    now.t += 2.999
    opt.step()
    sched.step()  # the Trainer's step, just inside the budget
    assert sched.get_last_lr()[0] == pytest.approx(1e-3 * 0.001 / 3.0)
    now.t += 0.002  # the callback runs after the budget ran out
    control = cb.on_step_end(TrainingArguments(output_dir="/tmp/unused", report_to=[]), TrainerState(), TrainerControl(),
                             lr_scheduler=sched)
    assert control.should_training_stop and cb.stopped_by_budget
    assert sched.get_last_lr()[0] == 0.0 and opt.param_groups[0]["lr"] == 0.0


def test_curve_reads_train_and_validation_entries():
    hist = [{"step": 1, "loss": 2.0, "elapsed_s": 1.0, "num_tokens": 10.0}, {"step": 1, "eval_loss": 2.5, "elapsed_s": 1.5},
            {"step": 2, "loss": 1.5, "elapsed_s": 2.0, "num_tokens": 20.0}, {"train_runtime": 3.0, "step": 2}]
    c = curve(hist)
    assert [p["loss"] for p in c["train"]] == [2.0, 1.5] and c["train"][1]["tokens"] == 20.0
    assert c["validation"] == [{"step": 1, "elapsed_s": 1.5, "loss": 2.5}] and c["train"][0]["learning_rate"] is None


def test_budgeted_run_stops_on_time_with_a_validation_curve(exported, tmp_path):
    """The tiny model (real TRL steps) with a 3-second budget and no step limit: it stops by the budget,
    validates on the clock, ends with a decayed learning rate, and reports tokens/s from TRL's count."""
    from training.config import StageConfig
    from training.sft import run

    ws, _, _ = exported
    cfg = StageConfig(stage=1, model="tiny", max_length=1024, learning_rate=1e-3, lr_scheduler_type="linear",
                      warmup_ratio=0.0, gradient_accumulation_steps=1, logging_steps=1, save_steps=10**6,
                      budget_minutes=0.05, eval_every_minutes=0.01, eval_max_rows=2, freeze_embeddings=True,
                      num_train_epochs=1000, output_dir=str(tmp_path / "out"), torch_threads=1)
    r = run(cfg, Path(ws.root))
    assert r["stopped_by"] == "budget" and r["global_step"] >= 1  # a step can take longer than 3 s on a busy box
    assert 3.0 <= r["train_seconds"] < 120
    assert r["final_learning_rate"] == 0.0  # linear decay on the clock: nothing left past the budget
    assert len(r["curve"]["validation"]) >= 1 and all(math.isfinite(p["loss"]) for p in r["curve"]["validation"])
    assert all(p["elapsed_s"] is not None for p in r["curve"]["train"])
    # eval_max_rows=2 caps the validation rows (the fixture's eval split holds fewer since main's fixtures changed)
    assert r["dataset"]["eval_rows_used"] == min(2, r["dataset"]["eval_rows"]) >= 1 and r["frozen_parameters"] > 0
    assert r["tokens_per_second"] > 0 and r["tokens_seen"] == r["curve"]["train"][-1]["tokens"]
    assert r["start_fingerprint"] != r["end_fingerprint"]


def test_train_top_layers_freezes_everything_below():
    from training.sft import train_top_layers
    from training.gguf_convert import load_tokenizer
    from training.tiny import TinyModelConfig, build_tiny_model

    model = build_tiny_model(load_tokenizer(), TinyModelConfig(num_hidden_layers=3))
    frozen = train_top_layers(model, 1)
    layers = model.get_decoder().layers
    assert all(p.requires_grad for p in layers[2].parameters()) and model.get_decoder().norm.weight.requires_grad
    assert not any(p.requires_grad for m in (layers[0], layers[1]) for p in m.parameters())
    assert not model.get_input_embeddings().weight.requires_grad  # tied to the LM head: frozen with it
    assert frozen == sum(p.numel() for p in model.parameters() if not p.requires_grad) > 0
    with pytest.raises(ValueError, match="3 decoder layers"):
        train_top_layers(model, 4)
