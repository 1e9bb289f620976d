"""train_sft: screen the scenarios for contamination, export verified trajectories, then stage-1 SFT,
then stage-2 SFT from stage 1's weights.

Training runs as a subprocess (`python -m training.sft` or `accelerate launch ...`), never in the
Prefect process; its log streams into the Prefect run's log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from agentscaler.catalog import Catalog
from agentscaler.errors import transient_only
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace, atomic_write_json
from flows.common import publish_markdown, run_record
from tasks.evaluation.contamination import check_contamination, screened_summary
from tasks.sft.export import export_sft
from tasks.sft.train import train_stage
from training.config import CONFIG_DIR, default_config_path, load_config


# Before any export: screen the scenarios against tau2/BFCL test items (cached by content, so a
# re-run whose scenarios did not change costs a file read; the export refuses unscreened ones).
@task(name="contamination", retries=1, retry_delay_seconds=1, retry_condition_fn=transient_only,
      tags=["contamination"])
def contamination_task(ws_root: str) -> dict[str, Any]:
    return screened_summary(check_contamination(Workspace(ws_root)))


# One task run = the whole export (one pass over the rollouts).
@task(name="export-sft", retries=1, retry_delay_seconds=1, retry_condition_fn=transient_only, tags=["export"])
def export_task(ws_root: str, stages: tuple[int, ...] = (1, 2), **options: Any) -> dict[str, Any]:
    return export_sft(Workspace(ws_root), stages=tuple(stages), **options)


# No retries: a failed training run is not transient (and is expensive); the flow decides.
@task(name="train-sft", retries=0, tags=["train"])
def train_task(ws_root: str, stage: int, **options: Any) -> dict[str, Any]:
    """One SFT stage in a subprocess; its log lines go to the Prefect run's log."""
    options.setdefault("on_line", get_run_logger().info)
    return train_stage(Workspace(ws_root), stage, **options)


@flow(name="train-sft")
def train_sft_flow(workspace: str, stages: list[int] | None = None, max_steps: int | None = None,
                   accelerate_config: str | None = None, num_processes: int | None = None,
                   model: str | None = None, run_ids: list[str] | None = None,
                   config_dir: str | None = None, budget_minutes: float | None = None) -> dict[str, Any]:
    """Stage 2 is skipped (not failed) when the export has no stage-2 rows.

    `config_dir` holds stage1.yaml/stage2.yaml (default training/configs/; the demo uses
    training/configs/cpu-demo/); `budget_minutes` is each stage's wall-time budget. With
    `accelerate_config` training runs under `accelerate launch` (DeepSpeed with the zero2/zero3
    configs) with `num_processes` processes, by default one per GPU of this machine (one without GPUs)."""
    ws = Workspace(workspace)
    if accelerate_config and num_processes is None:
        num_processes = machine_processes()
    stages = sorted(stages or [1, 2])
    catalog = Catalog(ws.catalog_path)
    with run_record(catalog, "train_sft", {"stages": stages, "max_steps": max_steps, "model": model,
                                           "budget_minutes": budget_minutes}) as summary:
        summary["contamination"] = contamination_task(str(ws.root))
        summary["export"] = {}
        results: dict[str, Any] = {}
        for stage in stages:
            # Each stage exports with its own config's max_length: rows are filtered, never truncated.
            config = _config_path(config_dir, stage) or default_config_path(stage)
            export = export_task(str(ws.root), (stage,), run_ids=run_ids, max_length=load_config(config).max_length)
            summary["export"][f"stage{stage}"] = export
            rows = _train_rows(export, stage)
            if rows == 0:
                results[f"stage{stage}"] = {"skipped": f"no stage-{stage} training rows"}
                continue
            key = _training_key(ws, stage, config, max_steps, model if stage == 1 else None, results, budget_minutes)
            done = _finished(ws, stage, key)
            if done is not None:  # same data, config and parent weights: a re-run resumes past it
                results[f"stage{stage}"] = {**done, "skipped_finished": True}
                continue
            results[f"stage{stage}"] = train_task(
                str(ws.root), stage, config=config, max_steps=max_steps, model=model if stage == 1 else None,
                accelerate_config=Path(accelerate_config) if accelerate_config else None,
                num_processes=num_processes, budget_minutes=budget_minutes,
                # a re-run of a stage killed part-way continues from its last checkpoint (training/resume.py;
                # a budgeted stage starts over: its clock cannot resume)
                resume_key=key)
            results[f"stage{stage}"]["key"] = key
            atomic_write_json(ws.models_dir / f"stage{stage}" / "key.json", {"key": key})
        summary["train"] = results
        publish_markdown("train-sft", _markdown(summary), "SFT export and training")
    return summary


def machine_processes() -> int:
    """One training process per GPU of this machine, 1 without GPUs."""
    import torch  # heavy (seconds): only when an accelerate launch is about to happen

    return max(1, torch.cuda.device_count())


def _training_key(ws: Workspace, stage: int, config: Path, max_steps: int | None, model: str | None,
                  results: dict[str, Any], budget_minutes: float | None = None) -> str:
    """What decides a stage's weights: its data, config, step cap, time budget, base model and (stage 2)
    stage 1's key."""
    report = ws.sft_dir / f"stage{stage}" / "report.json"
    data = json.loads(report.read_text()).get("content_hash") if report.exists() else None
    parent = (results.get("stage1") or {}).get("key") if stage == 2 else None
    return content_hash({"data": data, "config": Path(config).read_text(), "max_steps": max_steps,
                         "model": model, "parent": parent, "budget_minutes": budget_minutes})


def _finished(ws: Workspace, stage: int, key: str) -> dict[str, Any] | None:
    out = ws.models_dir / f"stage{stage}"
    try:
        if json.loads((out / "key.json").read_text())["key"] != key:
            return None
        return {**json.loads((out / "result.json").read_text()), "key": key}
    except (OSError, ValueError, KeyError):
        return None


def _config_path(config_dir: str | None, stage: int) -> Path | None:
    """A folder path, or a name under training/configs/ (e.g. "cpu-demo"); None = the default config."""
    if not config_dir:
        return None
    folder = Path(config_dir) if Path(config_dir).is_dir() else CONFIG_DIR / config_dir
    return folder / f"stage{stage}.yaml"


def _train_rows(export: dict[str, Any], stage: int) -> int:
    """Rows in the stage's train split, read from the export report (0 when absent)."""
    st = (export.get("stages") or {}).get(f"stage{stage}") or {}
    return int((st.get("rows") or {}).get("train", 0))


def _markdown(summary: dict[str, Any]) -> str:
    lines = ["# train_sft", "", "| stage | result |", "|---|---|"]
    for stage, r in summary.get("train", {}).items():
        if "skipped" in r:
            lines.append(f"| {stage} | skipped: {r['skipped']} |")
        else:
            val = (r.get("eval") or {}).get("eval_loss")
            lines.append(f"| {stage} | steps {r.get('global_step')} (stopped by {r.get('stopped_by')}), "
                         f"loss {r.get('train_loss')}, validation loss {val}, {r.get('tokens_per_second')} tokens/s |")
    return "\n".join(lines) + "\n"
