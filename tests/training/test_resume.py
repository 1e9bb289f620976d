"""training/resume.py and the resume arithmetic of training/sft.py, on files written here (the real
kill-and-resume run of the tiny model is tests/tasks/sft/test_train.py)."""

from __future__ import annotations

import json

from training.resume import RESUME_FILE, latest, resume_point
from training.sft import resumed_total


def _checkpoint(out, step: int, complete: bool = True) -> None:
    d = out / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "trainer_state.json").write_text("{}" if complete else '{"log_hist')  # cut short: not complete


def test_only_a_complete_checkpoint_of_the_same_key_is_resumed(tmp_path):
    out = tmp_path / "model"
    assert resume_point(out, "k1") is None and json.loads((out / RESUME_FILE).read_text()) == {"key": "k1"}
    _checkpoint(out, 10)
    _checkpoint(out, 20, complete=False)  # killed while saving: the one before it is the latest
    assert latest(out, "k1").name == "checkpoint-10" and resume_point(out, "k1").name == "checkpoint-10"
    assert resume_point(out, None) is None and (out / "checkpoint-10").exists()  # no key: nothing touched
    assert resume_point(out, "k1", budgeted=True) is None and not list(out.glob("checkpoint-*"))  # starts over
    _checkpoint(out, 30)
    assert latest(out, "k2") is None  # another key's folder
    assert resume_point(out, "k2") is None and not (out / "checkpoint-30").exists()  # removed, never resumed
    assert json.loads((out / RESUME_FILE).read_text()) == {"key": "k2"}


def test_token_count_over_a_resume():
    assert resumed_total([]) == 0.0
    assert resumed_total([10, 20, 30]) == 30.0  # one launch: TRL's cumulative count
    assert resumed_total([10, 20, 30, 5, 12]) == 42.0  # restored history up to 30, then counted from zero
