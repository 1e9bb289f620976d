"""evaluate: pass^k of a model on held-out domains' scenarios (and optionally tau2's tasks)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from prefect import flow

from agentscaler.catalog import Catalog
from agentscaler.workspace import Workspace
from flows.common import publish_markdown, run_record
from tasks.evaluation.evaluate import evaluate


@flow(name="evaluate")
def evaluate_flow(workspace: str, llm: str = "local", model: str = "smollm2-135m", k: int = 4,
                  split: str = "heldout", max_scenarios: int | None = None, tau2: bool = False,
                  checkpoint: str | None = None, max_turns: int = 6, max_steps: int = 4,
                  max_tokens: int = 256) -> dict[str, Any]:
    """llm="local" serves SmolLM2 (or `checkpoint`, a trained HF model dir) on loopback for the run."""
    from tasks.rollouts.engine import RolloutConfig

    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    params = {"llm": llm, "model": model, "k": k, "split": split, "max_scenarios": max_scenarios, "tau2": tau2,
              "checkpoint": checkpoint}
    with run_record(catalog, "evaluate", params) as summary:
        with serve(llm, checkpoint) as base_url:
            report = evaluate(ws, base_url, model=model, k=k, split=split, max_scenarios=max_scenarios, tau2=tau2,
                              concurrency=1 if llm == "local" else 8,  # one-slot local servers
                              cfg=RolloutConfig(max_turns=max_turns, max_steps=max_steps, max_tokens=max_tokens))
        summary.update(report=report)
        publish_markdown("evaluate", _markdown(model, report), "pass^k on held-out scenarios")
    return report


def serve(llm: str, checkpoint: str | None = None):
    """A context manager yielding a base URL: the given one, or a local server started for the block."""
    if llm != "local":
        return nullcontext(llm)
    if checkpoint:
        from agentscaler.hf_server import hf_server

        return hf_server(checkpoint)
    from agentscaler.llm_server import local_server

    return local_server()


def _markdown(model: str, report: dict[str, Any]) -> str:
    overall = ((report.get("pass^k") or {}).get("overall") or {}).get("pass^k") or {}
    lines = [f"# evaluate {model}", "", "| k | pass^k |", "|---|---|"]
    for k, v in sorted(overall.items()):
        lines.append(f"| {k} | {v} |")
    return "\n".join(lines) + "\n"
