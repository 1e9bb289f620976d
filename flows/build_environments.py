"""build_environments: one Prefect task per domain = synthesize its environment, then its scenarios.

Domains run concurrently on a bounded thread pool (each task drives its own sandbox worker
process). A failed domain is marked failed in the catalog with its error and never fails the
others; finished domains are skipped on a re-run (content-hash keys), so a killed run resumes.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from agentscaler.artifacts import load_tools
from agentscaler.catalog import Catalog
from agentscaler.errors import transient_only
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from flows.common import fan_out, failed_text, failure_lines, publish_markdown, run_record
from tasks.environments.synthesize import domain_tools, load_domain_records, synthesize_domain
from tasks.scenarios.build import build_scenarios

# Domains built at once (each drives its own sandbox worker). Set per worker machine.
MAX_WORKERS = int(os.environ.get("AGENTSCALER_MAX_WORKERS", "2"))


@task(name="build-domain", retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=transient_only,
      tags=["synthesize", "scenarios"])
def build_domain_task(item: dict[str, Any], workspace: str, synth: str, seed: int, per_domain: int,
                      max_length: int) -> dict[str, Any]:
    """item = {"record": domain record, "tools": its member tools as dicts}."""
    ws = Workspace(workspace)
    log = get_run_logger()
    record = item["record"]
    tools = [Tool.model_validate(t) for t in item["tools"]]
    t0 = time.perf_counter()
    spec = synthesize_domain(ws, record, tools, synth=synth, seed=seed)
    log.info("synthesize %s: %d tools, %s execute (%.1f s)", spec.id, len(spec.tools), spec.report.get("executes"),
             time.perf_counter() - t0)
    t0 = time.perf_counter()
    scen = build_scenarios(ws, spec.id, per_domain=per_domain, max_length=max_length, seed=seed)
    log.info("scenarios %s: %d kept%s (%.1f s)", spec.id, scen.get("kept", 0),
             ", unchanged" if scen.get("skipped") else "", time.perf_counter() - t0)
    return {"domain": spec.id, "tools": len(spec.tools), "executes": spec.report.get("executes"),
            "scenarios": scen.get("kept", 0), "skipped": bool(scen.get("skipped"))}


@flow(name="build-environments", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def build_environments_flow(workspace: str, synth: str = "rules", seed: int = 0, per_domain: int = 20,
                            max_length: int = 4, domains: list[str] | None = None,
                            limit: int | None = None) -> dict[str, Any]:
    """Synthesize + scenarios for every discovered domain (or only `domains`)."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    records = load_domain_records(ws)
    if domains is not None:
        wanted = set(domains)
        records = [r for r in records if r.get("domain") in wanted]
    records = records[:limit] if limit else records
    tools = load_tools(ws.tools_path)
    items = [{"record": r, "tools": [t.model_dump() for t in domain_tools(r, tools)]} for r in records]
    params = {"synth": synth, "seed": seed, "per_domain": per_domain, "max_length": max_length,
              "domains": len(records)}
    with run_record(catalog, "build_environments", params) as summary:
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
        publish_markdown("build-environments", _markdown(summary), "environments and scenarios per domain")
    return summary


def _markdown(summary: dict[str, Any]) -> str:
    lines = ["# build_environments", "", "| domains | built | failed | tools | tools that execute | scenarios |",
             "|---|---|---|---|---|---|",
             f"| {summary['domains']} | {summary['built']} | {len(summary['failed'])} | {summary['tools']} | "
             f"{summary['tools_execute']} | {summary['scenarios']} |"]
    if summary["failures"]:
        lines += ["", "## failed domains (stage: exception at file:line [whose fault])", ""]
        lines += [f"- {line}" for line in failure_lines(summary["failures"])]
    return "\n".join(lines) + "\n"
