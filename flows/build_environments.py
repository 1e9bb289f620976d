"""build_environments: one Prefect task per domain = synthesize its environment, then its scenarios.

Domains run concurrently on a bounded thread pool (each task drives its own sandbox worker
process). With `batch_deployment` (set by the build-environments deployment) the domains are split
into batches of `batch_size`, each its own run of that deployment (`build_batch_flow`) on the work
pool, so N workers build N batches at once. A failed domain is marked failed in the catalog with
its error and never fails the others; finished domains are skipped on a re-run (content-hash
keys), so a killed run resumes.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from agentscaler.artifacts import load_scenarios, load_tools
from agentscaler.catalog import Catalog
from agentscaler.errors import transient_only
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from envs.spec import DomainSpec
from flows.common import batch_outcome, batches, cell, fan_out, failed_text, failure_lines, publish_markdown, run_batch_deployments, run_record
from tasks.environments.rules import readable_name
from tasks.environments.synthesize import domain_tools, load_domain_records, synthesize_domain
from tasks.evaluation.report import funnel, funnel_markdown
from tasks.scenarios.build import build_scenarios

# Domains built at once (each drives its own sandbox worker). Set per worker machine.
MAX_WORKERS = int(os.environ.get("AGENTSCALER_MAX_WORKERS", "2"))
# Domains per batch run when batches go to a deployment: few enough task runs per flow run.
BATCH_SIZE = int(os.environ.get("AGENTSCALER_BATCH_SIZE", "25"))
BUILD_STAGES = ("synthesize", "scenarios")


@task(name="build-domain", task_run_name="build {item[name]}", retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=transient_only,
      tags=["synthesize", "scenarios"])
def build_domain_task(item: dict[str, Any], workspace: str, synth: str, seed: int, per_domain: int,
                      max_length: int) -> dict[str, Any]:
    """item = {"record": domain record, "tools": its member tools as dicts, "name": what a person reads}."""
    ws = Workspace(workspace)
    log = get_run_logger()
    record = item["record"]
    tools = [Tool.model_validate(t) for t in item["tools"]]
    t0 = time.perf_counter()
    spec = synthesize_domain(ws, record, tools, synth=synth, seed=seed)
    name = f"{spec.name} {spec.id}"  # the name synthesis gave it, which the task run's name guessed
    log.info("synthesize %s: %d tools, %s of them execute (%.1f s)", name, len(spec.tools),
             spec.report.get("executes"), time.perf_counter() - t0)
    t0 = time.perf_counter()
    scen = build_scenarios(ws, spec.id, per_domain=per_domain, max_length=max_length, seed=seed)
    log.info("scenarios %s: %d kept%s (%.1f s)", name, scen.get("kept", 0),
             ", unchanged" if scen.get("skipped") else "", time.perf_counter() - t0)
    return {"domain": spec.id, "tools": len(spec.tools), "executes": spec.report.get("executes"),
            "scenarios": scen.get("kept", 0), "skipped": bool(scen.get("skipped"))}


def _items(ws: Workspace, domains: list[str] | None, limit: int | None) -> list[dict[str, Any]]:
    """The domain records to build (all discovered, or only `domains`), each with its member tools."""
    records = load_domain_records(ws)
    if domains is not None:
        wanted = set(domains)
        records = [r for r in records if r.get("domain") in wanted]
    records = records[:limit] if limit else records
    tools = load_tools(ws.tools_path)
    out = []
    for r in records:
        members = domain_tools(r, tools)
        out.append({"record": r, "tools": [t.model_dump() for t in members],
                    "name": readable_name(str(r.get("domain")), members)})
    return out


def _built(ws: Workspace, domain: str) -> dict[str, Any]:
    """A built domain's figures, read back from the workspace (a batch ran in another process)."""
    spec = DomainSpec.model_validate_json((ws.domain_dir(domain) / "spec.json").read_text())
    return {"domain": spec.id, "tools": len(spec.tools), "executes": spec.report.get("executes"),
            "scenarios": len(load_scenarios(ws, domain)), "skipped": False}


@flow(name="build-batch", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def build_batch_flow(workspace: str, domains: list[str], synth: str = "rules", seed: int = 0, per_domain: int = 20,
                     max_length: int = 4) -> dict[str, Any]:
    """One batch of domains: build_environments' batch run, taken by whichever worker is free."""
    ws = Workspace(workspace)
    items = _items(ws, domains, None)
    results, failures = fan_out(build_domain_task, items, key=lambda it: str(it["record"].get("domain")),
                                workspace=str(ws.root), synth=synth, seed=seed, per_domain=per_domain,
                                max_length=max_length)
    publish_markdown("build-batch", "# build batch\n\n" + domain_table(items, results, failures),
                     f"{len(items)} domains of one batch: {len(results)} built, {len(failures)} failed")
    return {"built": sorted(results), "failed": failed_text(failures)}


@flow(name="build-environments", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def build_environments_flow(workspace: str, synth: str = "rules", seed: int = 0, per_domain: int = 20,
                            max_length: int = 4, domains: list[str] | None = None,
                            limit: int | None = None, batch_size: int | None = None,
                            batch_deployment: str | None = None) -> dict[str, Any]:
    """Synthesize + scenarios for every discovered domain (or only `domains`); with
    batch_deployment (e.g. "build-batch/build-batch"), batches of batch_size run on the pool."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    items = _items(ws, domains, limit)
    records = [it["record"] for it in items]
    size = batch_size or BATCH_SIZE
    params = {"synth": synth, "seed": seed, "per_domain": per_domain, "max_length": max_length,
              "domains": len(records), "batch_size": size, "batch_deployment": batch_deployment}
    with run_record(catalog, "build_environments", params) as summary:
        if batch_deployment:
            ids = [str(r.get("domain")) for r in records]
            parts = batches(ids, size)
            run_batch_deployments(batch_deployment, parts, {"workspace": str(ws.root), "synth": synth, "seed": seed,
                                                            "per_domain": per_domain, "max_length": max_length},
                                  catalog, BUILD_STAGES)
            results, failures = batch_outcome(catalog, ids, BUILD_STAGES, lambda d: _built(ws, d))
            summary["batches"] = len(parts)
        else:
            results, failures = fan_out(build_domain_task, items, key=lambda it: str(it["record"].get("domain")),
                                        label="build", workspace=str(ws.root), synth=synth, seed=seed,
                                        per_domain=per_domain, max_length=max_length)
        errors = failed_text(failures)
        summary.update(domains=len(records), built=len(results), failed=errors, failures=failures,
                       failed_by_kind=dict(Counter(f["kind"] for f in failures.values())),
                       scenarios=sum(r["scenarios"] for r in results.values()),
                       tools=sum(r["tools"] for r in results.values()),
                       tools_execute=sum(r["executes"] or 0 for r in results.values()))
        catalog.set_counts(summary["run_id"], "build_environments",
                           {"domains": len(records), "built": len(results), "failed": len(errors),
                            "scenarios": summary["scenarios"]})
        publish_markdown("build-environments", _markdown(summary, items, results, failures, funnel(ws, [])),
                         "environments and scenarios per domain")
    return summary


def domain_table(items: list[dict[str, Any]], results: dict[str, Any], failures: dict[str, dict[str, Any]]) -> str:
    """One row per domain, by its name: tools, tools that execute, scenarios, and its status or its
    error's type (failed domains first, each error linked to its full failure line below: stage,
    exception, file:line, whose fault, message)."""
    rows = []
    for it in items:
        d = str(it["record"].get("domain"))
        r, f = results.get(d), failures.get(d)
        if f is not None:
            # the error's type only, linked to its full line below: the UI cut a wider table off
            rows.append((0, f"| `{it['name']}` | {len(it['tools'])} | | | **failed**: "
                            f"[{cell(f['type'], 40)}](#failed-{d}) |"))
        elif r is not None:
            rows.append((1, f"| `{it['name']}` | {r['tools']} | {r['executes'] if r['executes'] is not None else ''} | "
                            f"{r['scenarios']} | {'unchanged' if r.get('skipped') else 'built'} |"))
        else:
            rows.append((0, f"| `{it['name']}` | {len(it['tools'])} | | | not built |"))
    lines = ["| domain | tools | tools that execute | scenarios | status or error |", "|---|---|---|---|---|",
             *(row for _, row in sorted(rows, key=lambda x: x[0]))]
    if failures:
        lines += ["", "## failed domains (stage: exception at file:line [whose fault])", ""]
        lines += [f'- <a id="failed-{k}"></a>{line}' for k, line in zip(sorted(failures), failure_lines(failures))]
    return "\n".join(lines) + "\n"


def _markdown(summary: dict[str, Any], items: list[dict[str, Any]], results: dict[str, Any],
              failures: dict[str, dict[str, Any]], counts: dict[str, int]) -> str:
    lines = ["# build_environments", "", "| domains | built | failed | tools | tools that execute (grounded call, non-empty result) | scenarios |",
             "|---|---|---|---|---|---|",
             f"| {summary['domains']} | {summary['built']} | {len(summary['failed'])} | {summary['tools']} | "
             f"{summary['tools_execute']} | {summary['scenarios']} |", "", "## per domain", "",
             domain_table(items, results, failures), "## the workspace's funnel so far (rollouts are counted by collect_experience, not here)", "",
             funnel_markdown(counts)]
    return "\n".join(lines) + "\n"
