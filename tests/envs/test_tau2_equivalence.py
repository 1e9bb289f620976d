"""Our SQL-backed tau2 tools versus tau2's own tools, call for call (envs/tau2/equivalence.py says how:
every recorded call on both sides, results, errors and the rows each write names, whole tables at
resets and at the end; benchmarks/bench_tau2.py records the same counts as figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.tau2.build import build_tau2_domain
from envs.tau2.equivalence import DOMAINS, compare_recorded_calls


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tau2")
    return {d: (build_tau2_domain(d, root / d), root / d)[1] for d in DOMAINS}


@pytest.mark.parametrize("domain", DOMAINS)
def test_same_results_and_state_as_tau2(domain: str, built: dict[str, Path]) -> None:
    stats = compare_recorded_calls(domain, built[domain])
    print(domain, {k: v for k, v in stats.items() if k != "mismatches"})
    assert stats["mismatch_count"] == 0, "\n".join(stats["mismatches"])
    assert stats["equal"] == stats["calls"] >= 300
    assert stats["writes_ok"] >= 40 and stats["errors"] >= 20, stats
