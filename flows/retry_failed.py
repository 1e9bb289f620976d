"""retry_failed: re-run only the domains whose status is failed, reusing everything finished.

Environment failures (synthesize, scenarios) re-run build_environments for those domains;
rollout failures re-run collect_experience for those domains. Finished work is skipped by the
stages themselves (content-hash keys), so nothing is redone or duplicated.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from agentscaler.catalog import Catalog
from agentscaler.workspace import Workspace
from flows.build_environments import BUILD_STAGES, build_environments_flow
from flows.collect_experience import EXPERIENCE_STAGES, collect_experience_flow


def failed_domains(catalog: Catalog, stages: tuple[str, ...]) -> list[str]:
    return sorted({r["domain"] for r in catalog.domains(status="failed") if r["stage"] in stages})


@flow(name="retry-failed")
def retry_failed_flow(workspace: str, synth: str = "rules", seed: int = 0, per_domain: int = 20,
                      max_length: int = 4, experience: dict[str, Any] | None = None) -> dict[str, Any]:
    """`experience` holds collect_experience parameters (llm, user, trials...) for rollout retries."""
    ws = Workspace(workspace)
    catalog = Catalog(ws.catalog_path)
    out: dict[str, Any] = {"build": None, "experience": None}
    build = failed_domains(catalog, BUILD_STAGES)
    if build:
        out["build"] = build_environments_flow(str(ws.root), synth=synth, seed=seed, per_domain=per_domain,
                                               max_length=max_length, domains=build)
    rollout = failed_domains(catalog, EXPERIENCE_STAGES)
    if rollout:
        out["experience"] = collect_experience_flow(str(ws.root), domains=rollout, **(experience or {}))
    out["retried"] = {"build": build, "rollout": rollout}
    return out
