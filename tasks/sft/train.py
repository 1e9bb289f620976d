"""Train stage: launch `training.sft` for one SFT stage as a subprocess, stream its log, record it.

Training never runs inside the Prefect (or CLI) process: a CUDA/DeepSpeed crash or an OOM kill
must not take the orchestrator down, and `accelerate launch` needs its own process tree anyway.
The child's stdout/stderr go line by line to `<ws>/models/stage{n}/train.log` and to `on_line`
(the console, Prefect's logger); the result is `<ws>/models/stage{n}/result.json`, recorded as a
run in the catalog (`flow = "train-stage{n}"`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentscaler import progress
from agentscaler.catalog import Catalog
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace
from training.config import StageConfig, default_config_path, load_config

REPO_ROOT = Path(__file__).resolve().parents[2]
ACCELERATE_DIR = REPO_ROOT / "training" / "accelerate"


# training.sft.PROGRESS (one line per optimizer step) and MICRO (one per accumulated micro-batch)
_STEP = re.compile(r"progress: step (\d+)/(\d+)(?: micro-batch (\d+)/(\d+))?$")


class TrainingFailed(RuntimeError):
    """The training subprocess exited non-zero; the message carries the log's tail."""


def train_command(ws: Workspace, config: Path, max_steps: int | None = None, accelerate_config: Path | None = None,
                  num_processes: int | None = None, model: str | None = None,
                  budget_minutes: float | None = None, save_steps: int | None = None,
                  resume_key: str | None = None) -> list[str]:
    """The command line: plain `python -m training.sft` or `accelerate launch --config_file ...`."""
    args = ["-m", "training.sft", "--config", str(config), "--workspace", str(ws.root)]
    if max_steps is not None:
        args += ["--max-steps", str(max_steps)]
    if budget_minutes is not None:
        args += ["--budget-minutes", str(budget_minutes)]
    if model is not None:
        args += ["--model", model]
    if save_steps is not None:
        args += ["--save-steps", str(save_steps)]
    if resume_key is not None:
        args += ["--resume-key", resume_key]
    if accelerate_config is None:
        return [sys.executable, *args]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config)]
    if num_processes is not None:
        launch += ["--num_processes", str(num_processes)]
    return [*launch, *args]


def make_resume_key(ws: Workspace, cfg: StageConfig, max_steps: int | None) -> str:
    """What a run must share with an interrupted one to continue it (`train --resume`): the effective
    config but where it checkpoints, the step limit, and the data (the saved datasets' fingerprints)."""
    data_dir = cfg.dataset_path(ws.root)
    data = sorted((str(p.relative_to(data_dir)), json.loads(p.read_text()).get("_fingerprint"))
                  for p in data_dir.rglob("state.json")) if data_dir.is_dir() else []
    return content_hash({"config": cfg.model_dump(exclude={"save_steps", "save_total_limit"}), "max_steps": max_steps,
                         "data": data})


def train_stage(ws: Workspace, stage: int, config: Path | None = None, max_steps: int | None = None,
                accelerate_config: Path | None = None, num_processes: int | None = None, model: str | None = None,
                on_line: Callable[[str], None] | None = None, budget_minutes: float | None = None,
                save_steps: int | None = None, resume_key: str | None = None, resume: bool = False) -> dict[str, Any]:
    """Run one stage to completion and return its result.json (plus the command and log path).

    `budget_minutes` sizes the run by wall time (training/budget.py); it overrides the config's.
    `resume_key` with `save_steps`: a checkpoint every save_steps, and a run killed before the end
    continues from its last one when started again with the same key (training/resume.py).
    `resume`: the key made here (make_resume_key: same config, steps and data)."""
    config = Path(config) if config else default_config_path(stage)
    cfg = load_config(config, model=model, budget_minutes=budget_minutes)  # fail fast here on a bad config, not in the child
    if cfg.stage != stage:
        raise ValueError(f"{config} is a stage {cfg.stage} config, not stage {stage}")
    out_dir = cfg.output_path(ws.root)
    out_dir.mkdir(parents=True, exist_ok=True)
    if resume and resume_key is None:
        resume_key = make_resume_key(ws, cfg, max_steps)
    cmd = train_command(ws, config, max_steps, accelerate_config, num_processes, model, budget_minutes,
                        save_steps, resume_key)
    log_path = out_dir / "train.log"
    run_id = f"train-stage{stage}-{uuid.uuid4().hex[:8]}"
    catalog = Catalog(ws.catalog_path)
    catalog.start_run(run_id, f"train-stage{stage}", {"cmd": cmd, "config": str(config), "max_steps": max_steps,
                                                       "budget_minutes": cfg.budget_minutes})
    (out_dir / "result.json").unlink(missing_ok=True)  # a stale result must not pass for this run's
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    tail: list[str] = []
    with open(log_path, "a", encoding="utf-8") as log, progress.stage(f"train stage {stage}", unit="steps") as bar:
        log.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                tail = (tail + [line.rstrip()])[-40:]
                if (m := _STEP.search(line.strip())) is not None:  # search: a stray tqdm bar may prefix the line
                    note = f"micro-batch {m[3]}/{m[4]}" if m[3] else ""
                    if cfg.budget_minutes:  # the step total is a placeholder (the clock stops the run): no ETA from it
                        bar.total, note = None, f"budget {cfg.budget_minutes:g} min" + (f", {note}" if note else "")
                    else:
                        bar.total = int(m[2])
                    bar.advance(int(m[1]) - bar.done, note=note)
                if on_line is not None:
                    on_line(line.rstrip())
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            catalog.finish_run(run_id, "failed", {"error": "interrupted"})
            raise
    result_path = out_dir / "result.json"
    if rc != 0 or not result_path.exists():
        msg = f"stage {stage} training exited with {rc}; log {log_path}:\n" + "\n".join(tail[-15:])
        catalog.finish_run(run_id, "failed", {"returncode": rc, "log": str(log_path)})
        raise TrainingFailed(msg)
    result = json.loads(result_path.read_text())
    result.update({"command": cmd, "log": str(log_path), "run_id": run_id})
    catalog.finish_run(run_id, "done", {k: result.get(k) for k in ("global_step", "train_loss", "final_dir",
                                                                   "tokens_per_second", "loss_finite", "stopped_by")})
    return result
