"""build_environments: synthesize each domain's environment, then its scenarios.

A local rules build of POOL_MIN_DOMAINS domains or more runs batches of domains on a pool of
PROCESSES processes (`--processes N` / AGENTSCALER_BUILD_PROCESSES; default MAX_WORKERS, the
domains built at once), one Prefect task per batch, whose process reads the corpus once and builds
its domains one after another (every check as in the one-domain path): the Python work of the
domains runs on every core, and no task run is started per domain. Side by side on a quiet 2-core
machine its build stage took 0.77x the wall time of one task per domain at 1k tools and 0.63x at
3k, with less CPU (benchmarks/results/scale_pool.md). Smaller builds, `--processes 0` and the LLM
synthesizer (its client lives in this process) take one Prefect task per domain on a bounded thread
pool (named by the domain, with its log lines and table row in the UI), each driving its own
sandbox worker process.
With `batch_deployment` (set by the build-environments deployment) the domains are split into
batches of `batch_size`, each its own run of that deployment (`build_batch_flow`) on the work pool,
so N workers build N batches at once. A failed domain is marked failed in the catalog with its
error and never fails the others; finished domains are skipped on a re-run (content-hash keys), so
a killed run resumes.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from agentscaler import progress
from agentscaler.artifacts import load_scenarios, load_tools
from agentscaler.catalog import Catalog
from agentscaler.errors import failure, transient_only
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from envs.spec import DomainSpec
from flows.build_worker import RETRY_DELAYS_S, build_batch, build_one
from flows.common import (batch_outcome, batches, cell, fail_unfinished, fan_out, failed_text, failure_lines,
                          publish_markdown, run_batch_deployments, run_record)
from tasks.environments.rules import readable_name
from tasks.environments.synthesize import domain_tools, load_domain_records, tool_positions
from tasks.evaluation.report import funnel, funnel_markdown

# Domains built at once (each drives its own sandbox worker). Set per worker machine.
MAX_WORKERS = int(os.environ.get("AGENTSCALER_MAX_WORKERS", "2"))
# Domains per batch run when batches go to a deployment: few enough task runs per flow run.
BATCH_SIZE = int(os.environ.get("AGENTSCALER_BATCH_SIZE", "25"))
# Processes that build batches of domains in a local rules build (0: one thread-pool task per domain).
PROCESSES = int(os.environ.get("AGENTSCALER_BUILD_PROCESSES", str(MAX_WORKERS)))
# Below this many domains a pooled build starts no pool (a spawned process's imports cost seconds).
POOL_MIN_DOMAINS = 24
BUILD_STAGES = ("synthesize", "scenarios")


@task(name="build-domain", task_run_name="build {item[name]}", retries=len(RETRY_DELAYS_S),
      retry_delay_seconds=list(RETRY_DELAYS_S), retry_condition_fn=transient_only,
      tags=["synthesize", "scenarios"])
def build_domain_task(item: dict[str, Any], workspace: str, synth: str, seed: int, per_domain: int,
                      max_length: int) -> dict[str, Any]:
    """item = {"record": domain record, "tools": its member tools as dicts, "name": what a person reads}."""
    ws = Workspace(workspace)
    log = get_run_logger()
    record = item["record"]
    tools = [Tool.model_validate(t) for t in item["tools"]]
    return build_one(ws, record, tools, synth, seed, per_domain, max_length, log=log.info)


@task(name="build-domains", tags=["synthesize", "scenarios"], cache_policy=NO_CACHE)
def build_domains_task(domains: list[str], batch: Future) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One batch of domains, built in a pool process (one Prefect task run per batch, not per domain):
    waits for the batch, already queued on the pool, and gives the run's log a line per domain (the
    pool process has no Prefect)."""
    results, failures = batch.result()
    log = get_run_logger()
    for d in domains:
        if d in results:
            r = results[d]
            log.info("built %s: %d tools, %s of them execute, %d scenarios%s", d, r["tools"], r["executes"],
                     r["scenarios"], " (unchanged)" if r.get("skipped") else "")
        elif d in failures:
            log.warning("failed %s: %s", d, failure_lines({d: failures[d]})[0])
    return results, failures


def _pooled(ws: Workspace, ids: list[str], processes: int, *, synth: str, seed: int, per_domain: int,
            max_length: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The domains in batches on `processes` spawned processes (spawn: this process runs Prefect's threads)."""
    size = max(1, min(BATCH_SIZE, -(-len(ids) // (processes * 4))))  # >= 4 batches a process: balanced ends
    parts = batches(ids, size)
    results: dict[str, Any] = {}
    failures: dict[str, dict[str, Any]] = {}
    # Every batch is queued on the pool at once, so a process never waits for a Prefect task run to
    # start (when it did, both processes sat idle for seconds between batches: at 10k tools they
    # worked 41% of the time instead of 49%); each batch's task run only waits for it and logs it.
    # A runner of its own: the flow's (MAX_WORKERS threads) would leave processes idle.
    with progress.stage("build", total=len(ids), unit="domains") as bar, \
            ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn")) as pool, \
            ThreadPoolTaskRunner(max_workers=processes) as runner:
        jobs = [(part, pool.submit(build_batch, str(ws.root), part, synth, seed, per_domain, max_length))
                for part in parts]
        runs = []
        for part, job in jobs:
            job.add_done_callback(lambda _f, n=len(part), k=part[-1]: bar.advance(n, note=k))
            runs.append(runner.submit(build_domains_task, {"domains": part, "batch": job}))
        for (part, job), run in zip(jobs, runs):
            state = run.wait() or run.state  # the batch's task run (its log lines) ends after the batch
            try:  # the batch's outcome is the pool's, whatever became of its task run
                res, fails = job.result()
                results.update(res)
                failures.update(fails)
            except BaseException as exc:  # noqa: BLE001 - a batch whose process died: its domains, by name
                _lost(ws, part, failure(exc, stage="orchestration"), failures, state)
                results.update((d, _built(ws, d)) for d in part if d not in failures)  # done before it died
    return results, failures


def _lost(ws: Workspace, part: list[str], f: dict[str, Any], failures: dict[str, Any], state: Any) -> None:
    """A batch whose process died or never ran: each of its domains not finished is failed, in the
    summary (infrastructure's fault) and in the catalog (so retry-failed finds it, never "running")."""
    reason = f"batch {state.type if state else '?'}: {f['type']}: {f['message']}"[:500]
    for d, stage in fail_unfinished(Catalog(ws.catalog_path), part, BUILD_STAGES, reason).items():
        failures[d] = {**f, "stage": stage, "kind": "infrastructure"}


def _records(ws: Workspace, domains: list[str] | None, limit: int | None) -> list[dict[str, Any]]:
    """The domain records to build (all discovered, or only `domains`)."""
    records = load_domain_records(ws)
    if domains is not None:
        wanted = set(domains)
        records = [r for r in records if r.get("domain") in wanted]
    return records[:limit] if limit else records


def _items(ws: Workspace, domains: list[str] | None, limit: int | None) -> list[dict[str, Any]]:
    """The domain records to build, each with its member tools (found by id through one index of the
    corpus: a scan per domain cost seconds at 10k tools, before any domain was built)."""
    records = _records(ws, domains, limit)
    tools = load_tools(ws.tools_path)
    where = tool_positions(tools)
    return [{"record": r, "members": domain_tools(r, tools, where)} for r in records]


def _task_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What one task run per domain takes (`build_domain_task`): its tools as dicts and the name a
    person reads (the run's name), which costs a plan of its tools: only for builds of one task run
    per domain, whose tables use it too (`_named`)."""
    return [{"record": it["record"], "tools": [t.model_dump() for t in it["members"]],
             "name": readable_name(str(it["record"].get("domain")), it["members"])} for it in items]


def _named(item: dict[str, Any], results: dict[str, Any]) -> tuple[str, str, int]:
    """A domain's (id, name, tools) in tables: the name its build gave it, else the one rule synthesis
    would give (a `_task_items` item or an `_items` one)."""
    d = str(item["record"].get("domain"))
    if "name" in item:
        return d, item["name"], len(item["tools"])
    return d, (results.get(d) or {}).get("name") or readable_name(d, item["members"]), len(item["members"])


def _built(ws: Workspace, domain: str) -> dict[str, Any]:
    """A built domain's figures, read back from the workspace (a batch ran in another process)."""
    spec = DomainSpec.model_validate_json((ws.domain_dir(domain) / "spec.json").read_text())
    return {"domain": spec.id, "name": f"{spec.name} {spec.id}", "tools": len(spec.tools),
            "executes": spec.report.get("executes"), "scenarios": len(load_scenarios(ws, domain)), "skipped": False}


@flow(name="build-batch", task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def build_batch_flow(workspace: str, domains: list[str], synth: str = "rules", seed: int = 0, per_domain: int = 20,
                     max_length: int = 4) -> dict[str, Any]:
    """One batch of domains: build_environments' batch run, taken by whichever worker is free."""
    ws = Workspace(workspace)
    items = _task_items(_items(ws, domains, None))
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
                            batch_deployment: str | None = None, processes: int | None = None) -> dict[str, Any]:
    """Synthesize + scenarios for every discovered domain (or only `domains`); with
    batch_deployment (e.g. "build-batch/build-batch"), batches of batch_size run on the pool;
    otherwise a rules build runs batches on `processes` local processes (default PROCESSES from
    POOL_MIN_DOMAINS domains on; 0 = one thread-pool task per domain)."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    items = _items(ws, domains, limit)  # each record with its member tools
    records = [it["record"] for it in items]
    size = batch_size or BATCH_SIZE
    procs = (PROCESSES if len(records) >= POOL_MIN_DOMAINS else 0) if processes is None else processes
    params = {"synth": synth, "seed": seed, "per_domain": per_domain, "max_length": max_length,
              "domains": len(records), "batch_size": size, "batch_deployment": batch_deployment,
              "processes": procs if synth == "rules" and not batch_deployment else 0}
    with run_record(catalog, "build_environments", params) as summary:
        if batch_deployment:
            ids = [str(r.get("domain")) for r in records]
            parts = batches(ids, size)
            run_batch_deployments(batch_deployment, parts, {"workspace": str(ws.root), "synth": synth, "seed": seed,
                                                            "per_domain": per_domain, "max_length": max_length},
                                  catalog, BUILD_STAGES)
            results, failures = batch_outcome(catalog, ids, BUILD_STAGES, lambda d: _built(ws, d))
            summary["batches"] = len(parts)
        elif synth == "rules" and procs > 0:
            results, failures = _pooled(ws, [str(r.get("domain")) for r in records], procs, synth=synth, seed=seed,
                                        per_domain=per_domain, max_length=max_length)
        else:
            items = _task_items(items)
            results, failures = fan_out(build_domain_task, items, key=lambda it: str(it["record"].get("domain")),
                                        label="build", workspace=str(ws.root), synth=synth, seed=seed,
                                        per_domain=per_domain, max_length=max_length)
        errors = failed_text(failures)
        # built counts every domain that is done, unchanged ones included; unchanged says how many of
        # them a re-run found already built for the same inputs (None: batch runs do not report it)
        unchanged = None if batch_deployment else sum(bool(r.get("skipped")) for r in results.values())
        summary.update(domains=len(records), built=len(results), unchanged=unchanged, failed=errors, failures=failures,
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
        d, name, n_tools = _named(it, results)
        r, f = results.get(d), failures.get(d)
        if f is not None:
            # the error's type only, linked to its full line below: the UI cut a wider table off
            rows.append((0, f"| `{name}` | {n_tools} | | | **failed**: [{cell(f['type'], 40)}](#failed-{d}) |"))
        elif r is not None:
            rows.append((1, f"| `{name}` | {r['tools']} | {r['executes'] if r['executes'] is not None else ''} | "
                            f"{r['scenarios']} | {'unchanged' if r.get('skipped') else 'built'} |"))
        else:
            rows.append((0, f"| `{name}` | {n_tools} | | | not built |"))
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
