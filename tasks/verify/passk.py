"""pass^k (tau-bench): the chance that k independent trials of a scenario all succeed.

With n trials of a scenario and c successes, the unbiased estimate is C(c, k) / C(n, k); a
domain's (or the overall) pass^k is the mean over scenarios with at least k trials. Trials
whose failure is attributed to the user simulator or the environment are left out by default
(`agent_only=True`): they say nothing about the agent.
"""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Any


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k) for one scenario (n trials, c successes); requires 1 <= k <= n, 0 <= c <= n."""
    if not (1 <= k <= n) or not (0 <= c <= n):
        raise ValueError(f"pass^k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    return comb(c, k) / comb(n, k)


def _mean_passk(counts: list[tuple[int, int]], max_k: int) -> dict[str, Any]:
    out: dict[str, Any] = {"scenarios": len(counts), "trials": sum(n for n, _ in counts),
                           "successes": sum(c for _, c in counts), "pass^k": {}}
    for k in range(1, max_k + 1):
        vals = [comb(c, k) / comb(n, k) for n, c in counts if n >= k]  # pass_hat_k (here 0 <= c <= n)
        if vals:
            out["pass^k"][str(k)] = round(sum(vals) / len(vals), 6)
    return out


def counted(result: dict[str, Any], agent_only: bool = True) -> bool:
    """Does this trial count towards pass^k? Not when it failed by the user simulator's or the
    environment's fault and only the agent is being scored."""
    return not (agent_only and not result["passed"] and result.get("attribution") in ("user", "environment"))


def _tally(results: list[dict[str, Any]], agent_only: bool
           ) -> tuple[dict[tuple[str, str], list[int]], dict[int, list[int]], int]:
    """One pass over the rows: (domain, scenario) -> [trials, successes] of the counted trials, in
    the order first seen (the means sum in that order); n_gold_calls -> [trials, successes] of
    the same; how many were not counted."""
    cells: dict[tuple[str, str], list[int]] = {}
    by_calls: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    excluded = 0
    for r in results:
        if not counted(r, agent_only):
            excluded += 1
            continue
        passed = bool(r["passed"])
        key = (r["domain"], r["scenario_id"])
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = [0, 0]
        cell[0] += 1
        cell[1] += passed
        bc = by_calls[int(r.get("n_gold_calls", 0))]
        bc[0] += 1
        bc[1] += passed
    return cells, by_calls, excluded


def scenario_counts(results: list[dict[str, Any]], agent_only: bool = True) -> dict[str, tuple[int, int]]:
    """"domain/scenario" -> (trials, successes) of the counted trials (the input of pass_hat_k)."""
    return {f"{d}/{s}": (n, c) for (d, s), (n, c) in _tally(results, agent_only)[0].items()}


def passk_report(results: list[dict[str, Any]], max_k: int | None = None, agent_only: bool = True) -> dict[str, Any]:
    """results: one row per trajectory {scenario_id, domain, passed, n_gold_calls, attribution}.

    Returns {"overall", "domains": {domain: ...}, "by_gold_calls": {n: {"trials", "accuracy"}},
    "excluded"}; each pass^k block maps str(k) to the mean over scenarios with >= k trials."""
    cells, by_calls, excluded = _tally(results, agent_only)
    overall = [(n, c) for n, c in cells.values()]
    domains: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (d, _), (n, c) in cells.items():
        domains[d].append((n, c))
    top_k = max_k or max((n for n, _ in overall), default=1)
    return {"overall": _mean_passk(overall, top_k),
            "domains": {d: _mean_passk(v, top_k) for d, v in sorted(domains.items())},
            "by_gold_calls": {str(n): {"trials": t, "accuracy": round(c / t, 6)} for n, (t, c) in sorted(by_calls.items())},
            "excluded": excluded, "agent_only": agent_only}
