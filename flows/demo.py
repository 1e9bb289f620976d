"""`make demo`: the whole factory on the embedded default, sized to finish in about 20 minutes on 2 cores.

Real corpora (BFCL, tau2, NESTFUL from their PyPI packages), rule-based synthesis, scripted user,
the local SmolLM2-135M server as the agent, a short CPU SFT run of SmolLM2-135M, evaluation on
held-out scenarios, and the report. Every stage resumes, so a second `make demo` is quick.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentscaler.workspace import Workspace
from flows.pipeline import pipeline_flow
from tasks.evaluation.report import write_report

DEMO = {
    "sources": ["bfcl", "tau2", "nestful"],
    "synth": "rules",
    "per_domain": 8,
    "max_length": 4,
    "llm": "local",
    "user": "scripted",
    "trials": 1,
    "rollout_domains": 4,
    "rollout_per_domain": 1,
    "gold_replay_domains": 20,  # demonstrations from gold calls, labelled agent_model="gold-replay"
    "train": True,
    "max_steps": 2,  # optimizer steps per SFT stage: ~40 s (stage 1) to ~90 s (stage 2) each on 2 cores
    "train_config_dir": "cpu-demo",  # training/configs/cpu-demo/: small steps for 2 CPU cores
    "evaluate": True,
    "k": 2,
    "eval_max_scenarios": 6,  # the demo's evaluation set: 6 held-out scenarios from >= 3 held-out domains
    "eval_domains": 3,
    # SmolLM2-135M on 2 cores: short conversations keep the demo inside its time budget.
    "max_turns": 3,
    "agent_steps": 3,
    "max_tokens": 160,
}


def run_demo(workspace: Path, **overrides: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    params = {**DEMO, **overrides}
    summary = pipeline_flow(str(workspace), **params)
    report = write_report(Workspace(workspace), None)
    return {"funnel": summary["funnel"], "failed": summary.get("failed", {}), "report": report.get("markdown"),
            "closed_loop": summary.get("closed_loop"),
            "wall_s": round(time.perf_counter() - t0, 1), "run_id": summary["run_id"]}
