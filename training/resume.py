"""Resume an interrupted run from its last checkpoint, and only a run of the same config and data.

A CPU run of 60 optimizer steps takes more than an hour here; a killed process (a session's end, a
machine going away) used to lose all of it. With a resume key (the caller's hash of the config and
the data, e.g. flows.closed_loop's), training.sft saves a checkpoint every `save_steps` and a later
process given the same key continues from the latest complete one: transformers restores the
weights, the optimizer, the scheduler, the RNG states and the place in the data, so the run goes on
as if never stopped. Checkpoints of another key (another config or data written into the same
folder) are removed, never resumed. Budgeted runs never resume: their clock would start again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

RESUME_FILE = "resume.json"  # {"key": ...}: whose checkpoints the folder holds
SECONDS_FILE = "step_seconds.json"  # in each checkpoint: the wall seconds of every step up to it


def _step(path: Path) -> int:
    return int(path.name.split("-", 1)[1])


def complete(checkpoint: Path) -> bool:
    """transformers writes trainer_state.json last (after weights, optimizer and RNG states)."""
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
        return True
    except (OSError, ValueError):
        return False


def checkpoints(out_dir: Path) -> list[Path]:
    """checkpoint-N folders in step order."""
    return sorted((p for p in Path(out_dir).glob("checkpoint-*") if p.is_dir() and p.name[11:].isdigit()), key=_step)


def remove_checkpoints(out_dir: Path) -> int:
    found = checkpoints(out_dir)
    for p in found:
        shutil.rmtree(p, ignore_errors=True)
    return len(found)


def latest(out_dir: Path, key: str) -> Path | None:
    """The latest complete checkpoint in out_dir of a run with this key (reads only)."""
    try:
        same = json.loads((Path(out_dir) / RESUME_FILE).read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        same = False
    found = [p for p in checkpoints(out_dir) if complete(p)] if same else []
    return found[-1] if found else None


def resume_point(out_dir: Path, key: str | None, budgeted: bool = False) -> Path | None:
    """The checkpoint to resume from: the latest complete one of a run with this key, else None.
    Without a key nothing changes (the old behaviour). With one, a folder that held another key's
    run, or a budgeted run, starts clean: its checkpoints are removed and the key is written."""
    if key is None:
        return None
    found = None if budgeted else latest(out_dir, key)
    if found is None:
        remove_checkpoints(out_dir)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / RESUME_FILE).write_text(json.dumps({"key": key}))
    return found


def prior_seconds(checkpoint: Path | None) -> list[float]:
    """The step seconds of the run up to `checkpoint` (empty when none, or not recorded)."""
    if checkpoint is None:
        return []
    try:
        return [float(x) for x in json.loads((checkpoint / SECONDS_FILE).read_text())]
    except (OSError, ValueError, TypeError):
        return []


def seconds_saver(timer: Any, before: list[float]) -> Any:
    """A callback writing every step's seconds so far (the resumed-from part, then `timer`'s) into
    each checkpoint it saves, so a resumed run still reports its whole training time."""
    from transformers import TrainerCallback  # the [train] extra: heavy, loaded on use

    class SaveSeconds(TrainerCallback):
        def on_save(self, args, state, control, **kw):  # noqa: ANN001
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and path.is_dir():
                (path / SECONDS_FILE).write_text(json.dumps([*before, *timer.seconds]))

    return SaveSeconds()
