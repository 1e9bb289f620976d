"""pass^k math against hand-computed values."""

from __future__ import annotations

import pytest

from tasks.verify.passk import pass_hat_k, passk_report


def test_pass_hat_k_hand_values() -> None:
    assert pass_hat_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)  # 3/6
    assert pass_hat_k(4, 2, 3) == 0.0
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_hat_k(5, 4, 4) == pytest.approx(1 / 5)
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)
    with pytest.raises(ValueError):
        pass_hat_k(2, 3, 1)


def _rows(domain: str, scenario: str, outcomes: list[bool], n_calls: int = 1, attribution: str = "agent") -> list[dict]:
    return [{"domain": domain, "scenario_id": scenario, "passed": p, "n_gold_calls": n_calls,
             "attribution": "none" if p else attribution} for p in outcomes]


def test_report_per_domain_overall_and_by_calls() -> None:
    rows = (_rows("a", "s1", [True, True, False, False], 1) + _rows("a", "s2", [True, True, True, True], 2)
            + _rows("b", "s3", [False, False, False, True], 2))
    rep = passk_report(rows)
    # a: s1 pass^1 .5, pass^2 1/6; s2: 1, 1 -> means .75 and 7/12
    assert rep["domains"]["a"]["pass^k"]["1"] == pytest.approx(0.75)
    assert rep["domains"]["a"]["pass^k"]["2"] == pytest.approx(7 / 12, abs=1e-6)
    assert rep["domains"]["b"]["pass^k"]["1"] == pytest.approx(0.25)
    assert rep["domains"]["b"]["pass^k"]["2"] == 0.0
    assert rep["overall"]["pass^k"]["1"] == pytest.approx((0.5 + 1 + 0.25) / 3, abs=1e-6)
    assert rep["overall"]["pass^k"]["4"] == pytest.approx(1 / 3, abs=1e-6)
    assert rep["by_gold_calls"] == {"1": {"trials": 4, "accuracy": 0.5}, "2": {"trials": 8, "accuracy": 0.625}}


def test_user_and_environment_failures_left_out() -> None:
    rows = _rows("a", "s1", [True, True], 1) + _rows("a", "s1", [False], 1, "user") \
        + _rows("a", "s1", [False], 1, "environment")
    clean = passk_report(rows)
    raw = passk_report(rows, agent_only=False)
    assert clean["excluded"] == 2 and clean["overall"]["pass^k"] == {"1": 1.0, "2": 1.0}
    assert raw["overall"]["pass^k"]["1"] == 0.5 and raw["overall"]["pass^k"]["2"] == pytest.approx(1 / 6, abs=1e-6)
