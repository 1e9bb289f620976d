"""Training sized by wall-clock time: stop at a budget, run the learning rate on the clock, validate on the clock.

Why: on a shared 2-core CPU a step takes anywhere from 5 to 50 s, so "N steps" says nothing
about when a run ends. With `budget_minutes` the run trains until the budget is spent (or the
step/epoch limit, whichever comes first), the learning rate warms up over `warmup_ratio` of the
budget and then follows the configured shape (constant, linear or cosine) over the *remaining
time*, so a budgeted run ends with a decayed learning rate whatever its step count turns out to be.
With `eval_every_minutes` the validation loss is measured on the clock as well (the curve in the
report), besides the step-based `eval_steps`.

`BudgetClock` is plain Python (tested without torch); `budget_callback` wraps it in a
transformers TrainerCallback that also stamps every log entry with the elapsed seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

SHAPES = ("constant", "constant_with_warmup", "linear", "cosine")


class BudgetClock:
    """Seconds since the first optimizer step was prepared (started on first use)."""

    def __init__(self, budget_s: float | None = None, now: Callable[[], float] = time.perf_counter):
        self.budget_s = budget_s
        self._now = now
        self._t0: float | None = None

    def start(self) -> None:
        if self._t0 is None:
            self._t0 = self._now()

    def elapsed(self) -> float:
        self.start()
        return self._now() - (self._t0 or 0.0)

    def spent(self) -> bool:
        return self.budget_s is not None and self.elapsed() >= self.budget_s

    def lr_multiplier(self, shape: str, warmup_ratio: float) -> float:
        """The learning-rate factor now: linear warmup over warmup_ratio of the budget, then `shape` on time."""
        if self.budget_s is None or self.budget_s <= 0:
            raise ValueError("a time-based learning rate needs a positive budget")
        frac = min(1.0, self.elapsed() / self.budget_s)
        if warmup_ratio > 0 and frac < warmup_ratio:
            return max(frac / warmup_ratio, 0.01)
        if shape in ("constant", "constant_with_warmup"):
            return 1.0
        rest = (frac - warmup_ratio) / max(1e-9, 1.0 - warmup_ratio)
        if shape == "linear":
            return max(0.0, 1.0 - rest)
        if shape == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * rest))
        raise ValueError(f"lr_scheduler_type {shape!r} has no time-based form; use one of {SHAPES}")


def budget_callback(clock: BudgetClock, eval_every_s: float | None = None) -> Any:
    """A TrainerCallback: stop once the budget is spent, ask for a validation pass every `eval_every_s`,
    and add `elapsed_s` to each log entry (train loss and eval loss alike)."""
    from transformers import TrainerCallback  # the [train] extra: heavy, loaded on use

    class Budget(TrainerCallback):
        def __init__(self) -> None:
            self.stopped_by_budget = False
            self._last_eval = 0.0

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            clock.start()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            now = clock.elapsed()
            if eval_every_s and now - self._last_eval >= eval_every_s:
                control.should_evaluate = True
                self._last_eval = now
            if clock.spent():
                control.should_training_stop = True
                self.stopped_by_budget = True
                # The Trainer stepped the scheduler just before this check, a few ms inside the budget;
                # step it once more so the run ends at the schedule's value for the spent budget (0 for
                # linear/cosine), not at whatever the last few milliseconds left (CI saw 1.7e-6).
                if kw.get("lr_scheduler") is not None:
                    kw["lr_scheduler"].step()
            return control

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if state.log_history:
                state.log_history[-1]["elapsed_s"] = round(clock.elapsed(), 1)

    return Budget()


def curve(log_history: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """The train and validation loss curves from a Trainer's log history: [{step, elapsed_s, loss}]
    (train entries also carry `tokens`, TRL's cumulative count of tokens trained on, and the learning rate)."""
    train = [{"step": h["step"], "elapsed_s": h.get("elapsed_s"), "loss": h["loss"], "tokens": h.get("num_tokens"),
              "learning_rate": h.get("learning_rate")} for h in log_history if "loss" in h]
    val = [{"step": h["step"], "elapsed_s": h.get("elapsed_s"), "loss": h["eval_loss"]}
           for h in log_history if "eval_loss" in h]
    return {"train": train, "validation": val}
