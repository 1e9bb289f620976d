"""What one process of the batched build runs: batches of domains, each built one after another
(its environment, then its scenarios), with no Prefect import, so a spawned pool process starts
quickly. flows/build_environments.py submits the batches (one Prefect task per batch) and also
builds one domain per task with `build_one`.
"""

from __future__ import annotations

import gc
import time
from contextlib import nullcontext
from functools import lru_cache
from typing import Any

from agentscaler.artifacts import load_tools
from agentscaler.errors import failure, is_transient
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from envs.sandbox import shared_launcher
from tasks.environments.synthesize import domain_tools, load_domain_records, synthesize_domain, tool_positions
from tasks.environments.validate import environment_files
from tasks.scenarios.build import build_scenarios

RETRY_DELAYS_S = (2, 10)  # pauses before retrying a transiently failed domain (here and in build-domain)


def build_one(ws: Workspace, record: dict[str, Any], tools: list[Tool], synth: str, seed: int, per_domain: int,
              max_length: int, log: Any = None) -> dict[str, Any]:
    """One domain: its environment, then its scenarios; the figures the build's summary counts."""
    t0 = time.perf_counter()
    # one sandbox worker per domain: validation's (started on the staging folder) builds the
    # scenarios too once the files are in place, when validation ran and left it healthy
    kept: list[tuple[Any, str]] = []
    try:
        spec = synthesize_domain(ws, record, tools, synth=synth, seed=seed, keep=kept)
        name = f"{spec.name} {spec.id}"  # the name synthesis gave it (the UI's task run name guessed it)
        if log:
            log("synthesize %s: %d tools, %s of them execute (%.1f s)", name, len(spec.tools),
                spec.report.get("executes"), time.perf_counter() - t0)
        t0 = time.perf_counter()
        final = ws.domain_dir(spec.id)
        files = environment_files(final) if kept else None
        env = next((e for e, fp in reversed(kept) if fp == files), None)  # the worker of these very files
        if env is not None:
            env.moved(final)
        scen = build_scenarios(ws, spec.id, per_domain=per_domain, max_length=max_length, seed=seed, env=env)
    finally:
        for e, _ in kept:
            e.close()  # closing twice is a no-op
    if log:
        log("scenarios %s: %d kept%s (%.1f s)", name, scen.get("kept", 0),
            ", unchanged" if scen.get("skipped") else "", time.perf_counter() - t0)
    return {"domain": spec.id, "name": name, "tools": len(spec.tools), "executes": spec.report.get("executes"),
            "scenarios": scen.get("kept", 0), "skipped": bool(scen.get("skipped"))}


@lru_cache(maxsize=1)
def _corpus(workspace: str, stamp: tuple[int, int, int, int]) -> tuple[dict[str, dict[str, Any]], list[Tool],
                                                                      dict[str, int]]:
    """A pool process's domain records by id, the corpus' tools and their positions by id, read once
    per process (again only when graph/domains.json or corpus/tools.parquet changed: `stamp`)."""
    ws = Workspace(workspace)
    tools = load_tools(ws.tools_path)
    out = {str(r.get("domain")): r for r in load_domain_records(ws)}, tools, tool_positions(tools)
    # The corpus lives as long as the process: out of the cyclic GC's reach, so that its full
    # collections stop walking it (320k objects at 30k tools, ~0.3 s each: 11% of the CPU of a
    # batch of large domains; with it frozen, 0.04 s each)
    gc.collect()
    gc.freeze()
    return out


def build_batch(workspace: str, domains: list[str], synth: str, seed: int, per_domain: int,
                max_length: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Build `domains` one after another in this process (a pool process, or any caller): (results
    by domain, failures by domain as `agentscaler.errors.failure`). A transient failure is retried
    after RETRY_DELAYS_S; a failed domain never stops the batch."""
    ws = Workspace(workspace)
    dp, tp = ws.domains_path.stat(), ws.tools_path.stat()
    records, tools, where = _corpus(str(ws.root), (dp.st_mtime_ns, dp.st_size, tp.st_mtime_ns, tp.st_size))
    results: dict[str, Any] = {}
    failures: dict[str, dict[str, Any]] = {}
    # the batch's sandbox workers are forks of one shared launcher where the kernel allows it
    # (envs.launcher: Landlock keeps each domain to its own files): no new sandbox per domain
    with shared_launcher([ws.cache_dir / "synth", ws.root / "domains"]) if synth == "rules" else nullcontext():
        for d in domains:
            record = records.get(d, {"domain": d})
            for attempt in range(len(RETRY_DELAYS_S) + 1):
                try:
                    results[d] = build_one(ws, record, domain_tools(record, tools, where), synth, seed, per_domain,
                                           max_length)
                    failures.pop(d, None)
                    break
                except Exception as exc:  # noqa: BLE001 - reported per domain, the batch goes on
                    failures[d] = failure(exc)
                    if not is_transient(exc) or attempt == len(RETRY_DELAYS_S):
                        break
                    time.sleep(RETRY_DELAYS_S[attempt])
    return results, failures
