"""95% bootstrap intervals for pass^k, resampling scenarios (the unit that varies between evaluations).

pass^k of a model is the mean over scenarios of C(c,k)/C(n,k) (tasks.verify.passk); trials of one
scenario are not independent draws of the benchmark, scenarios are. So an interval resamples
scenarios with replacement (percentile bootstrap, `samples` draws, a fixed seed: the same input gives
the same interval). Comparing two models on the same scenarios, `paired_difference` resamples the
shared scenarios once for both, which is tighter than two separate intervals (the scenario's
difficulty cancels); both are reported, and the issue's aim asks for separate intervals that do
not overlap.

Input everywhere: {"domain/scenario": (trials, successes)} from tasks.verify.passk.scenario_counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.verify.passk import pass_hat_k

SAMPLES = 2000
LEVEL = 0.95


def _values(counts: dict[str, tuple[int, int]], k: int) -> dict[str, float]:
    return {key: pass_hat_k(n, c, k) for key, (n, c) in counts.items() if n >= k}


def _interval(values: np.ndarray, samples: int, seed: int, level: float) -> dict[str, Any]:
    """Mean of `values` with its percentile bootstrap interval (rows: scenarios)."""
    if len(values) == 0:
        return {"estimate": None, "low": None, "high": None, "scenarios": 0}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(samples, len(values)))
    means = values[idx].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return {"estimate": round(float(values.mean()), 6), "low": round(float(low), 6), "high": round(float(high), 6),
            "scenarios": int(len(values))}


def passk_interval(counts: dict[str, tuple[int, int]], k: int, samples: int = SAMPLES, seed: int = 0,
                   level: float = LEVEL) -> dict[str, Any]:
    """pass^k over the scenarios with >= k counted trials, with its bootstrap interval."""
    vals = _values(counts, k)
    return _interval(np.array([vals[key] for key in sorted(vals)], dtype=float), samples, seed, level)


def passk_intervals(counts: dict[str, tuple[int, int]], max_k: int, samples: int = SAMPLES, seed: int = 0,
                    level: float = LEVEL) -> dict[str, dict[str, Any]]:
    """{str(k): passk_interval} for k = 1..max_k."""
    return {str(k): passk_interval(counts, k, samples, seed, level) for k in range(1, max_k + 1)}


def paired_difference(base: dict[str, tuple[int, int]], other: dict[str, tuple[int, int]], k: int,
                      samples: int = SAMPLES, seed: int = 0, level: float = LEVEL) -> dict[str, Any]:
    """pass^k(other) - pass^k(base) on the scenarios both have (>= k trials each), resampled together."""
    a, b = _values(base, k), _values(other, k)
    shared = sorted(set(a) & set(b))
    out = _interval(np.array([b[key] - a[key] for key in shared], dtype=float), samples, seed, level)
    return {**out, "excludes_zero": out["low"] is not None and (out["low"] > 0 or out["high"] < 0)}


def overlap(x: dict[str, Any], y: dict[str, Any]) -> bool | None:
    """Do two intervals overlap (None when either is empty)?"""
    if x.get("low") is None or y.get("low") is None:
        return None
    return not (x["high"] < y["low"] or y["high"] < x["low"])


def domain_interval(rows: list[tuple[str, float]], samples: int = SAMPLES, seed: int = 0,
                    level: float = LEVEL) -> dict[str, Any]:
    """Mean of per-item values with a bootstrap interval that resamples domains, not items.

    rows: (domain, value). Many items of one domain share its tools and its difficulty, so they are
    not independent draws: a cluster bootstrap (draw domains with replacement, pool their items) is
    the honest interval when there are many items per domain. For a paired comparison pass
    value = other - base per item."""
    if not rows:
        return {"estimate": None, "low": None, "high": None, "items": 0, "domains": 0}
    by: dict[str, list[float]] = {}
    for d, v in rows:
        by.setdefault(d, []).append(v)
    names = sorted(by)
    sums = np.array([sum(by[d]) for d in names], dtype=float)
    counts = np.array([len(by[d]) for d in names], dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(names), size=(samples, len(names)))
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return {"estimate": round(float(sums.sum() / counts.sum()), 6), "low": round(float(low), 6),
            "high": round(float(high), 6), "items": int(counts.sum()), "domains": len(names)}
