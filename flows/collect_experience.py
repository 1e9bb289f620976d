"""collect_experience: rollouts (simulated user <-> agent <-> sandboxed tools) + verification, per domain.

One Prefect task per domain: its conversations run async with many in flight against the LLM
endpoint(s), land in `rollouts/<run>--<domain>/trajectories.jsonl` as they finish, and are then
verified. A re-run with the same parameters resumes (finished trajectories are skipped). With
`llm="local"` the flow starts the local llama.cpp server for its duration.

With `batch_deployment` (set by the collect-experience deployment) the domains are split into
batches of `batch_size`, each its own run of that deployment (`collect_batch_flow`) on the work
pool, as build_environments does: N workers collect N batches at once, each domain's catalog row
names the worker, and a batch whose run crashed leaves its domains failed with the run's state.

Rejection sampling (`samples=N`, `agentscaler collect --samples N`): N samples per train-split
scenario at the temperature the one rule gives N trials (tasks.rollouts.conversation.
sampling_temperature), each verified by the same filters; the accepted ones are agent experience
labelled with the model (agent_model), and the summary reports acceptance overall, per domain and
per scenario length (tasks.rollouts.rejection). Held-out scenarios are never sampled.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.runtime import task_run
from prefect.task_runners import ThreadPoolTaskRunner

from agentscaler.artifacts import domain_label, load_trajectories, scenario_map
from agentscaler.catalog import Catalog
from agentscaler.endpoints import is_local, serve
from agentscaler.errors import error_text, tag_stage, transient_only
from agentscaler.hashing import content_hash
from agentscaler.workspace import Workspace
from flows.common import (batch_outcome, batches, cell, failed_text, fan_out, publish_markdown, run_batch_deployments,
                          run_record)
from tasks.evaluation.report import funnel, funnel_markdown, funnel_runs
from tasks.rollouts.conversation import RolloutConfig, sampling_temperature
from tasks.rollouts.engine import run_rollouts, select_scenarios
from tasks.rollouts.rejection import acceptance, acceptance_markdown
from tasks.verify.verify import verify_run

STAGE = "rollout"
DEFAULT_MODEL = "smollm2-135m"
MAX_WORKERS = int(os.environ.get("AGENTSCALER_ROLLOUT_WORKERS", "4"))
# Domains per batch run when batches go to a deployment.
BATCH_SIZE = int(os.environ.get("AGENTSCALER_BATCH_SIZE", "25"))
EXPERIENCE_STAGES = (STAGE,)


def experience_run_id(model: str, cfg: dict[str, Any], trials: int, split: str, per_domain: int | None) -> str:
    return "x" + content_hash({"model": model, "cfg": cfg, "trials": trials, "split": split, "n": per_domain}, 10)


def _run_name() -> str:
    """The rollout task run's name in the UI: the domain's name and id, not a hash prefix."""
    params = task_run.parameters
    return f"rollout {domain_label(Workspace(params['workspace']), params['domain'])}"


@task(name="rollout-verify", task_run_name=_run_name, retries=2, retry_delay_seconds=[5, 30],
      retry_condition_fn=transient_only, tags=["rollout"])
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
        get_run_logger().info("rollouts %s: %s conversations, %s verified (%.0f s)", domain_label(ws, domain),
                              verdicts.get("trajectories", 0), verdicts.get("passed", 0), rollout.get("wall_s") or 0)
    except Exception as exc:
        catalog.mark(domain, STAGE, "failed", error=error_text(exc))
        tag_stage(exc, STAGE)
        raise
    catalog.mark(domain, STAGE, "done", artifact=run_id)
    return _result(run_id, rollout, verdicts)


def _result(run_id: str, rollout: dict[str, Any], verdicts: dict[str, Any]) -> dict[str, Any]:
    """One domain's figures, from its rollout report and its verification report."""
    return {"run_id": run_id, "trajectories": verdicts.get("trajectories", 0), "passed": verdicts.get("passed", 0),
            "rollout": {k: rollout.get(k) for k in ("planned", "written", "skipped_existing", "slot_utilization", "wall_s")},
            "reasons": verdicts.get("reasons", {})}


def _collected(ws: Workspace, run_id: str) -> dict[str, Any]:
    """A collected domain's figures, read back from its run's files (a batch ran in another process)."""
    run_dir = ws.root / "rollouts" / run_id
    read = lambda name: json.loads((run_dir / name).read_text()) if (run_dir / name).exists() else {}  # noqa: E731
    return _result(run_id, read("report.json"), read("verify.json"))


def _collect(ws: Workspace, domains: list[str], llm: str | None, checkpoint: str | None, engine: str,
             precision: str, concurrency: int, **task_args: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The domains' rollouts + verification on this flow run's thread pool, the endpoint served
    for the duration (agentscaler.endpoints.serve)."""
    # llama.cpp's local server has one slot: interleaved conversations would evict each
    # other's prompt cache, so locally domains and conversations go one at a time.
    local = is_local(llm)
    with serve(llm, checkpoint=checkpoint, engine=engine, precision=precision) as base_url:
        return fan_out(experience_task, domains, key=str, sequential=local, label="collect", workspace=str(ws.root),
                       base_url=base_url, concurrency=1 if local else concurrency, **task_args)


@flow(name="collect-batch", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def collect_batch_flow(workspace: str, domains: list[str], prefix: str, cfg: dict[str, Any], llm: str | None = None,
                       model: str = DEFAULT_MODEL, trials: int = 1, split: str = "train",
                       per_domain: int | None = None, concurrency: int = 8, checkpoint: str | None = None,
                       engine: str = "llama", precision: str = "f16") -> dict[str, Any]:
    """One batch of collect_experience's domains, taken by whichever worker is free."""
    ws = Workspace(workspace)
    results, failures = _collect(ws, domains, llm, checkpoint, engine, precision, concurrency, prefix=prefix,
                                 model=model, trials=trials, split=split, per_domain=per_domain, cfg=cfg)
    publish_markdown("collect-batch", "# collect batch\n\n" + "\n".join(_domain_rows(results, failures)) + "\n",
                     f"{len(domains)} domains of one batch: {len(results)} collected, {len(failures)} failed")
    return {"collected": sorted(results), "failed": failed_text(failures)}


@flow(name="collect-experience", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def collect_experience_flow(workspace: str, llm: str | None = None, model: str = DEFAULT_MODEL, user: str = "scripted",
                            trials: int = 1, split: str = "train", per_domain: int | None = None,
                            domains: list[str] | None = None, concurrency: int = 8,
                            max_turns: int = 6, max_steps: int = 4, max_tokens: int = 256,
                            samples: int | None = None, checkpoint: str | None = None, engine: str = "llama",
                            precision: str = "f16", batch_size: int | None = None,
                            batch_deployment: str | None = None) -> dict[str, Any]:
    """Rollouts + verification for every domain that has scenarios of `split` (or only `domains`).

    `samples` (rejection sampling) is the number of samples per scenario; it replaces `trials` and
    needs the train split. With llm="local", `checkpoint` (an HF model dir, e.g. a trained stage)
    is the model sampled, served as agentscaler.endpoints.serve serves checkpoints, and the default
    `model` label becomes the checkpoint's last two path parts (e.g. "stage1/final"). With
    batch_deployment (e.g. "collect-batch/collect-batch"), batches of batch_size run on the pool."""
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
              "domains": len(wanted), "prefix": prefix, "samples": samples, "temperature": temp, "checkpoint": checkpoint,
              "batch_size": batch_size, "batch_deployment": batch_deployment}
    with run_record(catalog, "collect_experience", params) as summary:
        args = {"prefix": prefix, "model": model, "trials": trials, "split": split, "per_domain": per_domain,
                "cfg": cfg}
        if batch_deployment:
            for d in wanted:  # "done" below means done by this run's batches, not by an earlier run
                catalog.mark(d, STAGE, "pending")
            parts = batches(wanted, batch_size or BATCH_SIZE)
            run_batch_deployments(batch_deployment, parts, {"workspace": str(ws.root), "llm": llm, **args,
                                                            "concurrency": concurrency, "checkpoint": checkpoint,
                                                            "engine": engine, "precision": precision},
                                  catalog, EXPERIENCE_STAGES)
            results, failures = batch_outcome(catalog, wanted, EXPERIENCE_STAGES,
                                              lambda d: _collected(ws, f"{prefix}--{d}"))
            summary["batches"] = len(parts)
        else:
            results, failures = _collect(ws, wanted, llm, checkpoint, engine, precision, concurrency, **args)
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
        publish_markdown("collect-experience", _markdown(summary, results) + "\n## funnel (this run's trajectories)\n\n"
                         + funnel_markdown(funnel(ws, run_ids), funnel_runs(ws, run_ids)), "rollouts and verification")
    return summary


def _domain_rows(results: dict[str, Any], failures: dict[str, dict[str, Any]]) -> list[str]:
    """The per-domain table: failed domains first, with their error."""
    lines = ["| domain | trajectories | passed | slot use | status | error |", "|---|---|---|---|---|---|"]
    for d, f in sorted(failures.items()):
        lines.append(f"| `{d}` | | | | **failed** ({f['stage']}) | {cell(f['type'] + ': ' + f['message'])} |")
    for d, r in sorted(results.items()):
        lines.append(f"| `{d}` | {r['trajectories']} | {r['passed']} | {r['rollout'].get('slot_utilization')} | done | |")
    return lines


def _markdown(summary: dict[str, Any], results: dict[str, Any]) -> str:
    lines = ["# collect_experience", "", f"trajectories {summary['trajectories']}, verified {summary['verified']}, "
             f"failed domains {len(summary['failed'])}; {summary['samples']} sample(s) per scenario at temperature "
             f"{summary['temperature']}", "", *_domain_rows(results, summary["failures"])]
    return "\n".join([*lines, "", *acceptance_markdown(summary["acceptance"])]) + "\n"
