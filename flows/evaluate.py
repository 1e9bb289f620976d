"""evaluate: pass^k of a model on held-out domains' scenarios (and optionally tau2's tasks)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from agentscaler.catalog import Catalog
from agentscaler.endpoints import is_local, runtime_label, serve
from agentscaler.workspace import Workspace
from flows.common import publish_markdown, run_record
from tasks.evaluation.eval_set import load_eval_set
from tasks.evaluation.evaluate import evaluate
from tasks.rollouts.conversation import RolloutConfig, sampling_temperature


@flow(name="evaluate")
def evaluate_flow(workspace: str, llm: str | None = None, model: str = "smollm2-135m", k: int = 4,
                  split: str = "heldout", max_scenarios: int | None = None, tau2: bool = False,
                  checkpoint: str | None = None, engine: str = "llama", precision: str = "f16",
                  max_turns: int = 6, max_steps: int = 4, max_tokens: int = 256,
                  eval_set: str | None = None) -> dict[str, Any]:
    """llm="local" serves SmolLM2 (or `checkpoint`, an HF model dir, exported to GGUF at `precision`,
    or on transformers with engine="hf") on loopback for the run; `eval_set` scores exactly the
    scenarios of reports/eval-set-<name>.json (tasks.evaluation.eval_set)."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    params = {"llm": llm, "model": model, "k": k, "split": split, "max_scenarios": max_scenarios, "tau2": tau2,
              "checkpoint": checkpoint, "engine": engine, "precision": precision, "eval_set": eval_set}
    scenario_ids = load_eval_set(ws, eval_set)["scenario_ids"] if eval_set else None
    temp = sampling_temperature(k)
    cfg = RolloutConfig(max_turns=max_turns, max_steps=max_steps, max_tokens=max_tokens, temperature=temp,
                        user_temperature=temp)
    with run_record(catalog, "evaluate", params) as summary:
        with serve(llm, checkpoint=checkpoint, engine=engine, precision=precision) as base_url:
            report = evaluate(ws, base_url, model=model, k=k, split=split, max_scenarios=max_scenarios, tau2=tau2,
                              concurrency=1 if is_local(llm) else 8, cfg=cfg,  # one-slot local servers
                              scenario_ids=scenario_ids)
        if is_local(llm):
            report["runtime"] = runtime_label(checkpoint, engine, precision)
        summary.update(report=report)
        publish_markdown("evaluate", _markdown(model, report), "pass^k on held-out scenarios")
    return report


def _markdown(model: str, report: dict[str, Any]) -> str:
    overall = (report.get("intervals") or {}).get("overall", {}).get("pass^k") or {}
    lines = [f"# evaluate {model}", "", "| k | pass^k | 95% interval |", "|---|---|---|"]
    for k, v in sorted(overall.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {k} | {v.get('estimate')} | [{v.get('low')}, {v.get('high')}] |")
    return "\n".join(lines) + "\n"
