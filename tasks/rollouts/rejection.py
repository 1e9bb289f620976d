"""Rejection sampling: N samples per train-split scenario from the current model, each verified by the
same filters as any trajectory (tasks.verify); the accepted ones are agent experience, labelled with
the model that produced them (`Trajectory.agent_model`) and never mixed up with gold replays.

`acceptance()` is what a collection reports: the share of samples accepted, overall, per domain and
per scenario length (gold calls), and how many scenarios got at least one accepted sample (what
rejection sampling adds to the training set). Only agent experience counts; a held-out scenario's
trajectory is never a training sample and is counted under `heldout_skipped` if one is passed in.
"""

from __future__ import annotations

from typing import Any

from agentscaler.models import Scenario, Trajectory


def _cell() -> dict[str, Any]:
    return {"samples": 0, "accepted": 0, "scenarios": set(), "scenarios_accepted": set()}


def _public(c: dict[str, Any]) -> dict[str, Any]:
    return {"samples": c["samples"], "accepted": c["accepted"],
            "rate": round(c["accepted"] / c["samples"], 4) if c["samples"] else None,
            "scenarios": len(c["scenarios"]), "scenarios_accepted": len(c["scenarios_accepted"])}


def acceptance(trajectories: list[Trajectory], scenarios: dict[str, Scenario]) -> dict[str, Any]:
    """Acceptance of verified agent-experience samples: {"overall", "by_domain", "by_length", "agent_models",
    "unverified", "heldout_skipped"}; each cell has samples, accepted, rate, scenarios, scenarios_accepted."""
    overall, by_domain, by_length = _cell(), {}, {}
    models: set[str] = set()
    unverified = heldout = 0
    for t in trajectories:
        if t.origin != "agent":
            continue
        s = scenarios.get(t.scenario_id)
        if s is not None and s.split != "train":
            heldout += 1
            continue
        if t.verdict is None:
            unverified += 1
            continue
        models.add(t.agent_model)
        length = str(len(s.gold_calls)) if s is not None else "unknown"
        for c in (overall, by_domain.setdefault(t.domain, _cell()), by_length.setdefault(length, _cell())):
            c["samples"] += 1
            c["scenarios"].add(t.scenario_id)
            if t.verdict.passed:
                c["accepted"] += 1
                c["scenarios_accepted"].add(t.scenario_id)
    return {"overall": _public(overall), "by_domain": {d: _public(c) for d, c in sorted(by_domain.items())},
            "by_length": {n: _public(c) for n, c in sorted(by_length.items(), key=lambda kv: (len(kv[0]), kv[0]))},
            "agent_models": sorted(models), "unverified": unverified, "heldout_skipped": heldout}


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"


def acceptance_markdown(acc: dict[str, Any]) -> list[str]:
    """Markdown lines: acceptance by scenario length, then by domain."""
    def table(key: str, cells: dict[str, Any]) -> list[str]:
        return [f"| {key} | samples | accepted | rate | scenarios with an accepted sample |", "|---|---|---|---|---|",
                *[f"| {k} | {c['samples']} | {c['accepted']} | {_pct(c['rate'])} | {c['scenarios_accepted']}/"
                  f"{c['scenarios']} |" for k, c in cells.items()]]

    o = acc["overall"]
    return [f"Acceptance of agent experience ({', '.join(acc['agent_models']) or 'no model'}; gold replays are not "
            f"samples): {o['accepted']}/{o['samples']} samples ({_pct(o['rate'])}), {o['scenarios_accepted']}/"
            f"{o['scenarios']} scenarios with an accepted sample.", "", *table("gold calls", acc["by_length"]), "",
            *table("domain", acc["by_domain"])]
