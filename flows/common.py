"""What every flow shares: a catalog run record, per-domain fan-out, and the summary artifact."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect.artifacts import create_markdown_artifact

from agentscaler import progress
from agentscaler.catalog import Catalog
from agentscaler.errors import failure
from agentscaler.hashing import content_hash


@contextmanager
def run_record(catalog: Catalog, flow: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Record a flow run in the catalog; the body fills the yielded summary dict.

    The run ends `failed` if the body raises, else `done`, or `done_with_failures` when the
    summary names failed items; a body may also set summary["status"] itself (e.g. "failed" for
    an ingest that accepted nothing)."""
    run_id = f"{flow}-" + content_hash({"params": params, "t": time.time_ns()})
    catalog.start_run(run_id, flow, params)
    summary: dict[str, Any] = {"run_id": run_id}
    try:
        yield summary
    except BaseException as exc:
        catalog.finish_run(run_id, "failed", {**summary, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        raise
    failed = summary.get("failed") or {}
    status = summary.pop("status", None) or ("done" if not failed else "done_with_failures")
    catalog.finish_run(run_id, status, summary)


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


def publish_markdown(key: str, markdown: str, description: str = "") -> None:
    """Attach a markdown artifact to the current Prefect run (visible in the UI); no-op outside one."""
    try:
        create_markdown_artifact(key=key, markdown=markdown, description=description)
    except Exception:  # noqa: BLE001 - artifacts are a convenience, never a reason to fail a run
        pass
