"""What every flow shares: a catalog run record, per-domain fan-out, the summary artifact, and the
endpoint's request slots."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect.artifacts import create_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.concurrency.asyncio import concurrency
from prefect.context import FlowRunContext, TaskRunContext
from prefect.deployments import run_deployment
from prefect.settings import get_current_settings

from agentscaler import progress
from agentscaler.catalog import Catalog, run_record  # noqa: F401 - run_record: re-exported for the flows
from agentscaler.errors import failure
from agentscaler.llm import REQUEST_SLOT

# The global concurrency limit that guards the shared model endpoint (created by `agentscaler deploy`).
ENDPOINT_LIMIT = "vllm-endpoint"


# API URL -> does ENDPOINT_LIMIT exist there (asked once per server and process).
_LIMIT_EXISTS: dict[str, bool] = {}


async def _limit_exists(url: str) -> bool:
    """A server without the limit (no `agentscaler deploy` yet, a test's temporary server) or one
    that does not answer within 10 s holds no slots: never a warning per request, never a hang."""
    if url not in _LIMIT_EXISTS:
        try:
            async with get_client() as client:
                await asyncio.wait_for(client.read_global_concurrency_limit_by_name(ENDPOINT_LIMIT), 10)
            _LIMIT_EXISTS[url] = True
        except Exception:  # noqa: BLE001 - not found, unreachable or timed out: no slot to hold
            _LIMIT_EXISTS[url] = False
    return _LIMIT_EXISTS[url]


@contextlib.asynccontextmanager
async def endpoint_slot() -> AsyncIterator[None]:
    """One slot of ENDPOINT_LIMIT for one request in flight when a Prefect server is configured
    (PREFECT_API_URL) and holds the limit, else nothing: local runs have no server to hold the count."""
    url = get_current_settings().api.url
    if not url or not await _limit_exists(url):
        yield
        return
    async with concurrency(ENDPOINT_LIMIT, occupy=1, strict=False):
        yield


REQUEST_SLOT["factory"] = endpoint_slot  # every LLMClient request in a process that runs flows


def fan_out(task: Any, items: list[Any], key: Callable[[Any], str], sequential: bool = False,
            label: str | None = None, unit: str = "domains",
            **kwargs: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Submit one task run per item and wait for all; a failed item never fails the others.

    Returns (results by key, failures by key: `agentscaler.errors.failure`, i.e. the stage, the
    exception type, where it was raised and whether it is the domain's fault). The plain functions
    behind the tasks mark the catalog themselves, so a failure is already recorded with its reason
    when it lands here. `sequential` waits for each run before submitting the next (a one-slot LLM
    server). Each finished item advances the progress stage `label` (default: the task's name)."""
    futures = {}
    with progress.stage(label or task.name, total=len(items), unit=unit) as bar:
        for item in items:
            k = key(item)
            futures[k] = fut = task.submit(item, **kwargs)
            fut.add_done_callback(lambda _f, k=k: bar.advance(note=k))
            if sequential:
                fut.wait()
        results: dict[str, Any] = {}
        failures: dict[str, dict[str, Any]] = {}
        for k, fut in futures.items():
            state = fut.wait() or fut.state
            if state.is_completed():
                results[k] = fut.result()
            else:
                try:
                    fut.result(raise_on_failure=True)
                    failures[k] = {"stage": "orchestration", "type": f"task state {state.type}", "where": "",
                                   "our_code": "", "message": str(state.message or "")[:500], "kind": "infrastructure"}
                except BaseException as exc:  # noqa: BLE001 - reported per domain
                    failures[k] = failure(exc)
    return results, failures


def failed_text(failures: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The summaries' `failed` key: one "Type: message" line per failed item (as it always was)."""
    return {k: f"{f['type']}: {f['message']}"[:500] for k, f in failures.items()}


def failure_lines(failures: dict[str, dict[str, Any]]) -> list[str]:
    """One readable line per failed item: stage, type, location, whose fault, message."""
    return [f"{k}: {f['stage']}: {f['type']} at {f['where'] or '?'}"
            + (f" (from {f['our_code']})" if f["our_code"] and f["our_code"] != f["where"] else "")
            + f" [{f['kind']}]: {f['message'][:200]}" for k, f in sorted(failures.items())]


def cell(text: str, limit: int = 160) -> str:
    """Text that stays inside one markdown table cell (one line, pipes escaped, at most `limit`)."""
    return " ".join(text.replace("|", "\\|").split())[:limit]


def batches(items: list[Any], size: int) -> list[list[Any]]:
    """Consecutive slices of at most `size` items (size < 1 counts as 1)."""
    size = max(1, size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def run_batch_deployments(deployment: str, parts: list[list[str]], params: dict[str, Any], catalog: Catalog,
                          stages: tuple[str, ...], poll_s: float = 2.0) -> dict[str, str]:
    """Run each batch of domains as its own run of `deployment` (parameter `domains`), all at once,
    so every worker on the pool takes batches; wait for all of them.

    Returns errors by domain for the domains of batches whose run did not complete. Those domains,
    unless already done, are marked failed in the catalog with the run's state (a killed worker
    leaves its domains failed with the reason, never "running"), so retry-failed finds them."""
    def one(part: list[str]) -> tuple[list[str], Any]:
        return part, run_deployment(name=deployment, parameters={**params, "domains": part}, timeout=None,
                                    poll_interval=poll_s, as_subflow=True)

    errors: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(len(parts), 64))) as pool:
        # each thread runs in a copy of this context, so the batch runs show as this run's subflows
        futures = [pool.submit(contextvars.copy_context().run, one, part) for part in parts]
        for part, run in (f.result() for f in futures):
            if run.state is not None and run.state.is_completed():
                continue
            reason = (f"batch run {run.name} of {deployment} ended {run.state.name if run.state else 'without a state'}"
                      f": {(run.state.message if run.state else '') or ''}")[:500]
            for domain in fail_unfinished(catalog, part, stages, reason):
                errors[domain] = reason
    return errors


def fail_unfinished(catalog: Catalog, part: list[str], stages: tuple[str, ...], reason: str) -> dict[str, str]:
    """A batch that died or never ran: each of its domains with a stage not done is marked failed
    at that stage with `reason` (never left "running"; retry-failed finds it). {domain: stage}."""
    marked: dict[str, str] = {}
    for domain in part:
        status = {st: (catalog.stage_status(domain, st) or {}).get("status") for st in stages}
        undone = [st for st in stages if status[st] != "done"]
        if undone:
            catalog.mark(domain, undone[0], "failed", error=reason)
            marked[domain] = undone[0]
    return marked


def batch_outcome(catalog: Catalog, ids: list[str], stages: tuple[str, ...],
                  read: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """After run_batch_deployments: (results by domain, read back by `read`, for the domains whose
    every stage is done; failures by domain, in fan_out's shape, for the rest). A stage's recorded
    error is the domain's fault unless its batch run crashed or never ran (infrastructure)."""
    results: dict[str, Any] = {}
    failures: dict[str, dict[str, Any]] = {}
    for d in ids:
        st = {s: catalog.stage_status(d, s) or {} for s in stages}
        if all(v.get("status") == "done" for v in st.values()):
            results[d] = read(d)
            continue
        stage, err = next(((s, str(v.get("error"))) for s, v in st.items() if v.get("status") == "failed"),
                          ("orchestration", "not done"))
        failures[d] = {"stage": stage, "type": "BatchFailure", "where": "", "our_code": "", "message": err[:500],
                       "kind": "infrastructure" if stage == "orchestration" or "Crashed" in err else "domain"}
    return results, failures


def publish_markdown(key: str, markdown: str, description: str = "") -> None:
    """Attach a markdown artifact to the current Prefect run (visible in the UI); no-op outside one."""
    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return  # outside a run: nothing to attach it to (Prefect would start a temporary server to store it)
    try:
        create_markdown_artifact(key=key, markdown=markdown, description=description)
    except Exception:  # noqa: BLE001 - artifacts are a convenience, never a reason to fail a run
        pass
