"""collect_experience: rollouts (simulated user <-> agent <-> sandboxed tools) + verification, per domain.

One Prefect task per domain: its conversations run async with many in flight against the LLM
endpoint(s), land in `rollouts/<run>--<domain>/trajectories.jsonl` as they finish, and are then
verified. A re-run with the same parameters resumes (finished trajectories are skipped). With
`llm="local"` the flow starts the local llama.cpp server for its duration.

Rejection sampling (`samples=N`, `agentscaler collect --samples N`): N samples per train-split
scenario at the temperature the one rule gives N trials (tasks.rollouts.conversation.
sampling_temperature), each verified by the same filters; the accepted ones are agent experience
labelled with the model (agent_model), and the summary reports acceptance overall, per domain and
per scenario length (tasks.rollouts.rejection). Held-out scenarios are never sampled.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from agentscaler.artifacts import load_trajectories, scenario_map
from agentscaler.catalog import Catalog
from agentscaler.endpoints import is_local, serve
from agentscaler.errors import error_text, tag_stage, transient_only
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace
from flows.common import failed_text, fan_out, publish_markdown, run_record
from tasks.rollouts.conversation import RolloutConfig, sampling_temperature
from tasks.rollouts.engine import run_rollouts, select_scenarios
from tasks.rollouts.rejection import acceptance, acceptance_markdown
from tasks.verify.verify import verify_run

STAGE = "rollout"
DEFAULT_MODEL = "smollm2-135m"
MAX_WORKERS = int(os.environ.get("AGENTSCALER_ROLLOUT_WORKERS", "4"))


def experience_run_id(model: str, cfg: dict[str, Any], trials: int, split: str, per_domain: int | None) -> str:
    return "x" + content_hash({"model": model, "cfg": cfg, "trials": trials, "split": split, "n": per_domain}, 10)


@task(name="rollout-verify", retries=2, retry_delay_seconds=[5, 30], retry_condition_fn=transient_only, tags=["rollout"])
def experience_task(domain: str, workspace: str, base_url: str | list[str], prefix: str, model: str, trials: int,
                    split: str, per_domain: int | None, cfg: dict[str, Any], concurrency: int) -> dict[str, Any]:
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    run_id = f"{prefix}--{domain}"
    catalog.mark(domain, STAGE, "running")
    try:
        rollout = run_rollouts(ws, base_url, model=model, trials=trials, split=split, max_scenarios=per_domain,
                               domains=[domain], cfg=RolloutConfig(**cfg), run_id=run_id, concurrency=concurrency)
        verdicts = verify_run(ws, run_id)
        get_run_logger().info("rollouts %s: %s conversations, %s verified (%.0f s)", domain,
                              verdicts.get("trajectories", 0), verdicts.get("passed", 0), rollout.get("wall_s") or 0)
    except Exception as exc:
        catalog.mark(domain, STAGE, "failed", error=error_text(exc))
        tag_stage(exc, STAGE)
        raise
    catalog.mark(domain, STAGE, "done", artifact=run_id)
    return {"run_id": run_id, "trajectories": verdicts.get("trajectories", 0), "passed": verdicts.get("passed", 0),
            "rollout": {k: rollout.get(k) for k in ("planned", "written", "skipped_existing", "slot_utilization", "wall_s")},
            "reasons": verdicts.get("reasons", {})}


@flow(name="collect-experience", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def collect_experience_flow(workspace: str, llm: str | None = None, model: str = DEFAULT_MODEL, user: str = "scripted",
                            trials: int = 1, split: str = "train", per_domain: int | None = None,
                            domains: list[str] | None = None, concurrency: int = 8,
                            max_turns: int = 6, max_steps: int = 4, max_tokens: int = 256,
                            samples: int | None = None, checkpoint: str | None = None, engine: str = "llama",
                            precision: str = "f16") -> dict[str, Any]:
    """Rollouts + verification for every domain that has scenarios of `split` (or only `domains`).

    `samples` (rejection sampling) is the number of samples per scenario; it replaces `trials` and
    needs the train split. With llm="local", `checkpoint` (an HF model dir, e.g. a trained stage)
    is the model sampled, served as agentscaler.endpoints.serve serves checkpoints, and the default
    `model` label becomes the checkpoint's last two path parts (e.g. "stage1/final")."""
    if samples is not None:
        if samples < 1 or split != "train":
            raise ValueError(f"rejection sampling draws training data: samples >= 1 on the train split "
                             f"(got samples={samples}, split={split!r})")
        trials = samples
    if checkpoint and model == DEFAULT_MODEL:  # label the experience with the model that produces it
        model = "/".join(Path(checkpoint).parts[-2:])
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    temp = sampling_temperature(trials)
    cfg = RolloutConfig(user=user, max_turns=max_turns, max_steps=max_steps, max_tokens=max_tokens,
                        temperature=temp, user_temperature=temp).model_dump()
    prefix = experience_run_id(model, cfg, trials, split, per_domain)
    wanted = [d for d in (domains or ws.domain_ids()) if select_scenarios(ws, split, 1, [d])]
    params = {"llm": llm, "model": model, "user": user, "trials": trials, "split": split, "per_domain": per_domain,
              "domains": len(wanted), "prefix": prefix, "samples": samples, "temperature": temp, "checkpoint": checkpoint}
    with run_record(catalog, "collect_experience", params) as summary:
        # llama.cpp's local server has one slot: interleaved conversations would evict each
        # other's prompt cache, so locally domains and conversations go one at a time.
        local = is_local(llm)
        with serve(llm, checkpoint=checkpoint, engine=engine, precision=precision) as base_url:
            results, failures = fan_out(experience_task, wanted, key=str, sequential=local, label="collect",
                                        workspace=str(ws.root), base_url=base_url, prefix=prefix, model=model,
                                        trials=trials, split=split, per_domain=per_domain, cfg=cfg,
                                        concurrency=1 if local else concurrency)
        errors = failed_text(failures)
        run_ids = sorted(r["run_id"] for r in results.values())
        trajs = [t for r in run_ids for t in load_trajectories(ws, r)]
        summary.update(prefix=prefix, domains=len(wanted), failed=errors, failures=failures,
                       failed_by_kind=dict(Counter(f["kind"] for f in failures.values())), run_ids=run_ids,
                       trajectories=sum(r["trajectories"] for r in results.values()),
                       verified=sum(r["passed"] for r in results.values()), samples=trials, temperature=temp,
                       acceptance=acceptance(trajs, scenario_map(ws, {t.domain for t in trajs})))
        catalog.set_counts(summary["run_id"], "collect_experience",
                           {"domains": len(wanted), "failed": len(errors), "trajectories": summary["trajectories"],
                            "verified": summary["verified"]})
        publish_markdown("collect-experience", _markdown(summary, results), "rollouts and verification")
    return summary


def _markdown(summary: dict[str, Any], results: dict[str, Any]) -> str:
    lines = ["# collect_experience", "", f"trajectories {summary['trajectories']}, verified {summary['verified']}, "
             f"failed domains {len(summary['failed'])}; {summary['samples']} sample(s) per scenario at temperature "
             f"{summary['temperature']}", "", "| domain | trajectories | passed | slot use |", "|---|---|---|---|"]
    for d, r in sorted(results.items()):
        lines.append(f"| `{d}` | {r['trajectories']} | {r['passed']} | {r['rollout'].get('slot_utilization')} |")
    return "\n".join([*lines, "", *acceptance_markdown(summary["acceptance"])]) + "\n"
