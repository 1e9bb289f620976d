"""Export stage: verified trajectories -> SFT datasets for stage 1 and stage 2 (training/export.py).

`export_stage(ws, stages)` is the plain function; `export_task` is the thin Prefect wrapper (one
task run = the whole export, since it is one pass over the rollouts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentscaler.workspace import Workspace


def export_stage(ws: Workspace, stages: tuple[int, ...] = (1, 2), run_ids: list[str] | None = None,
                 max_length: int | None = None, target_domains: list[str] | None = None,
                 eval_fraction: float = 0.1) -> dict[str, Any]:
    """Export and return the counts report (kept per stage/split, dropped by reason, errors).

    `max_length` defaults to the stage config's, so export and training filter the same way.
    Trajectories of held-out scenarios (evaluation runs) and of scenarios flagged by the
    contamination check (`agentscaler contamination`) stay out, counted by reason.
    """
    from tasks.evaluation.contamination import contaminated_ids
    from tasks.scenarios.build import load_scenarios

    exclude = {s.id: "heldout_scenario" for s in load_scenarios(ws) if s.split != "train"}
    exclude.update({sid: "contaminated" for sid in contaminated_ids(ws)})

    from training.config import default_config_path, load_config
    from training.export import export_sft

    if max_length is None:
        max_length = min(load_config(default_config_path(s)).max_length for s in stages)
    return export_sft(ws, stages=stages, run_ids=run_ids, max_length=max_length,
                      target_domains=target_domains, eval_fraction=eval_fraction,
                      exclude_scenarios=exclude)


# --- Prefect ----------------------------------------------------------------------------------

def _task_fn(ws_root: str, stages: tuple[int, ...] = (1, 2), **options: Any) -> dict[str, Any]:
    return export_stage(Workspace(ws_root), tuple(stages), **options)


def _make_task() -> Callable[..., Any]:
    from prefect import task

    from agentscaler.errors import transient_only

    return task(name="export-sft", retries=1, retry_delay_seconds=1, retry_condition_fn=transient_only,
                tags=["export"])(_task_fn)


try:
    export_task = _make_task()
except ImportError:  # pragma: no cover
    export_task = None
