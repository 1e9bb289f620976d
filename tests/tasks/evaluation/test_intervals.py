"""Bootstrap intervals for pass^k (our arithmetic, on hand-built counts) and the side-by-side comparison."""

from __future__ import annotations

import pytest

from tasks.evaluation.compare import compare, markdown
from tasks.evaluation.evaluate import breakdown
from tasks.evaluation.intervals import domain_interval, overlap, paired_difference, passk_interval, passk_intervals
from tasks.verify.passk import scenario_counts


def _counts(outcomes: list[list[bool]], prefix: str = "d/s") -> dict[str, tuple[int, int]]:
    return {f"{prefix}{i}": (len(o), sum(o)) for i, o in enumerate(outcomes)}


def test_interval_brackets_the_mean_and_narrows_with_more_scenarios():
    few = _counts([[True] * 4, [False] * 4] * 5)  # 10 scenarios, half solved: pass^1 = 0.5
    many = _counts([[True] * 4, [False] * 4] * 100)
    a, b = passk_interval(few, 1), passk_interval(many, 1)
    assert a["estimate"] == b["estimate"] == 0.5
    assert a["low"] < 0.5 < a["high"] and b["low"] < 0.5 < b["high"]
    assert (b["high"] - b["low"]) < (a["high"] - a["low"]) / 3  # ~ 1/sqrt(20)
    assert passk_interval(few, 1) == a  # seeded: the same input gives the same interval
    assert passk_interval(_counts([[True] * 4] * 7), 2) == {"estimate": 1.0, "low": 1.0, "high": 1.0, "scenarios": 7}


def test_passk_uses_only_scenarios_with_k_trials_and_matches_the_estimator():
    counts = {"d/a": (4, 2), "d/b": (4, 4), "d/c": (1, 1)}
    iv = passk_intervals(counts, 4)
    assert iv["1"]["scenarios"] == 3 and iv["1"]["estimate"] == pytest.approx((0.5 + 1 + 1) / 3, abs=1e-6)
    assert iv["2"]["scenarios"] == 2 and iv["2"]["estimate"] == pytest.approx((1 / 6 + 1) / 2, abs=1e-6)
    assert passk_interval({}, 1)["estimate"] is None


def test_paired_difference_is_tighter_than_separate_intervals():
    """Scenario difficulty shared by both models cancels in the paired difference."""
    import random

    rng = random.Random(0)
    base, trained = {}, {}
    for i in range(60):
        p = rng.random()  # the scenario's difficulty, shared
        base[f"d/{i}"] = (4, sum(rng.random() < p for _ in range(4)))
        trained[f"d/{i}"] = (4, min(4, base[f"d/{i}"][1] + (1 if i % 3 == 0 else 0)))
    b, t = passk_interval(base, 1), passk_interval(trained, 1)
    d = paired_difference(base, trained, 1)
    assert d["estimate"] == pytest.approx(t["estimate"] - b["estimate"], abs=1e-6)
    assert (d["high"] - d["low"]) < (b["high"] - b["low"])
    assert d["excludes_zero"] and d["low"] > 0
    assert overlap(b, t) is True and overlap({"low": 0, "high": 0.1}, {"low": 0.2, "high": 0.3}) is False
    assert overlap({"low": None}, t) is None


def _rows(scenario: str, outcomes: list[bool], n_calls: int, reason: str = "state_mismatch") -> list[dict]:
    return [{"domain": "d", "scenario_id": scenario, "passed": p, "n_gold_calls": n_calls,
             "attribution": "none" if p else "agent", "reasons": [] if p else [reason]} for p in outcomes]


def _report(rows: list[dict], model: str) -> dict:
    from tasks.evaluation.evaluate import GROUPS

    return {"model": model, "run_id": f"r-{model}", "k": 4, "verified": len(rows),
            "scenario_ids": sorted({r["scenario_id"] for r in rows}), "intervals": breakdown(rows, 4),
            "scenario_counts": {g: {k: list(v) for k, v in scenario_counts([r for r in rows if keep(r)]).items()}
                                for g, keep in GROUPS.items()},
            "diagnostics": {"tried_call": 1, "well_formed_call": 1, "right_first_tool": 1, "right_first_call": 0},
            "reasons": {}}


def test_breakdown_and_comparison_by_group_and_length():
    base = _rows("s1", [False] * 4, 1, "no_tool_calls") + _rows("s2", [False] * 4, 2) + _rows("s3", [True] * 4, 3)
    trained = _rows("s1", [True] * 4, 1) + _rows("s2", [True, True, False, False], 2) + _rows("s3", [True] * 4, 3)
    b = breakdown(base, 4)
    assert b["single_call"]["scenarios"] == 1 and b["multi_call"]["scenarios"] == 2
    assert b["by_length"]["1"]["reasons"] == {"no_tool_calls": 4} and b["by_length"]["2"]["reasons"] == {"state_mismatch": 4}
    assert b["overall"]["pass^k"]["1"]["estimate"] == pytest.approx(1 / 3, abs=1e-6)
    cmp = compare(_report(base, "base"), _report(trained, "sft"))
    assert cmp["same_scenarios"] and cmp["k"] == 4
    one = cmp["groups"]["overall"]["pass^k"]["1"]
    assert one["difference"]["estimate"] == pytest.approx((1 + 0.5 + 1) / 3 - 1 / 3, abs=1e-6)
    assert cmp["groups"]["single_call"]["pass^k"]["1"]["difference"]["estimate"] == 1.0
    assert cmp["aim"]["pass^1_gain"] == pytest.approx(0.5, abs=1e-6) and cmp["aim"]["gain_at_least_10_points"]
    assert cmp["aim"]["met"] is False  # 3 scenarios: the intervals overlap, so the aim is not met
    md = markdown(cmp, "base", "sft")
    assert "| single-call (1) | 1 | 0.0 [0.0, 0.0] | 100.0 [100.0, 100.0] | no | 100.0 [100.0, 100.0] |" in md
    assert "no_tool_calls 4" in md and "**not met**" in md
    assert "First calls with the right tool but other arguments" not in md  # reports that did not count them
    trained_report = _report(trained, "sft")
    trained_report["diagnostics"]["first_call_arguments"] = {"missing": 0, "empty_value": 1, "wrong_value": 0, "extra": 0}
    md = markdown(compare(_report(base, "base"), trained_report), "base", "sft")
    assert "| model | missing | empty value | wrong value | extra |" in md
    assert "| base | n/a | n/a | n/a | n/a |" in md and "| sft | 0 | 1 | 0 | 0 |" in md
    assert "bag-of-words picker" not in md  # reports that did not count the text matcher's picks
    base_report = _report(base, "base")
    base_report["diagnostics"]["text_match_first_tool"], trained_report["diagnostics"]["text_match_first_tool"] = 9, 10
    md = markdown(compare(base_report, trained_report), "base", "sft")
    assert "names the first gold tool in 9 of the base model's 12 trials and 10 of the trained model's 12." in md


def _curve_point(domains: int, passed: set[int], n: int = 60) -> dict:
    """A scaling point as flows.closed_loop._point keeps it: per scenario [trials, passed] (k = 1)."""
    return {"domains": domains, "label": str(domains),
            "scenario_counts": {f"s{i:02d}": [1, int(i in passed)] for i in range(n)}}


def test_curve_differences_say_whether_more_domains_beat_fewer_beyond_the_noise():
    from tasks.evaluation.compare import curve_differences

    base = {"domains": 0, "label": "0 (base)", "scenario_counts": {f"s{i:02d}": [1, 0] for i in range(60)}}
    rising = [base, _curve_point(8, set(range(5))), _curve_point(32, set(range(15))), _curve_point(128, set(range(30)))]
    d = curve_differences(rising)
    assert [(s["from"], s["to"]) for s in d["steps"]] == [("8", "32"), ("32", "128")]  # the base point is not a step
    assert (d["span"]["from"], d["span"]["to"]) == ("8", "128") and abs(d["span"]["estimate"] - 25 / 60) < 1e-6
    assert d["span"]["excludes_zero"] and d["verdict"] == "rises"
    assert curve_differences(rising[::-1][:3] + [base])["verdict"] != "rises"  # order matters: the caller sorts
    falling = [_curve_point(8, set(range(30))), _curve_point(32, set(range(12)))]
    assert curve_differences(falling)["verdict"] == "falls"
    # a small change either way is within the noise of 60 scenarios
    assert curve_differences([_curve_point(8, set(range(10))), _curve_point(32, set(range(12)))])["verdict"] == "flat"
    # the widest beats the narrowest, but a step in between falls beyond its interval
    mixed = [_curve_point(8, set(range(20))), _curve_point(32, set()), _curve_point(128, set(range(35)))]
    assert curve_differences(mixed)["verdict"] == "mixed"
    assert curve_differences([base, _curve_point(8, {1})]) is None  # one trained point: no curve
    assert curve_differences([_curve_point(8, {1}), {"domains": 32, "label": "32"}]) is None  # no counts recorded


def test_setting_differences_pair_the_same_checkpoints_points():
    """Hand-built points (the test is about pairing and the arithmetic): one checkpoint evaluated two ways."""
    from tasks.evaluation.compare import setting_differences

    def point(label: str, model: str, passed: set[int]) -> dict:
        return {**_curve_point(8, passed), "label": label, "model": model, "pass^1": {"estimate": len(passed) / 60},
                "diagnostics": {"right_first_call": len(passed)}}

    before = [point("8", "m-a", set(range(10))), point("32", "m-b", set(range(10))), point("all", "m-c", set(range(5)))]
    after = [point("8", "m-a", set(range(25))), point("32", "m-x", set(range(30))), point("all", "m-c", set(range(5)))]
    rows = setting_differences(before, after)
    assert [r["label"] for r in rows] == ["8", "all"]  # 32: another checkpoint, not compared
    assert rows[0]["difference"]["estimate"] == pytest.approx(15 / 60) and rows[0]["difference"]["excludes_zero"]
    assert rows[1]["difference"]["estimate"] == 0.0 and not rows[1]["difference"]["excludes_zero"]
    assert rows[0]["diagnostics"] == {"before": {"right_first_call": 10}, "after": {"right_first_call": 25}}


def test_domain_interval_pools_items_and_resamples_whole_domains():
    # 20 domains of 30 items each, all right or all wrong within a domain: half right overall
    rows = [(f"d{d}", float(d % 2)) for d in range(20) for _ in range(30)]
    iv = domain_interval(rows)
    assert iv["estimate"] == 0.5 and iv["items"] == 600 and iv["domains"] == 20
    # the items of a domain move together, so the interval is as wide as 20 draws, not 600
    items = passk_interval({f"d/{i}": (1, int(v)) for i, (_, v) in enumerate(rows)}, 1)
    assert (iv["high"] - iv["low"]) > 3 * (items["high"] - items["low"])
    assert domain_interval(rows) == iv  # seeded
    # unequal domain sizes: the estimate is the pooled mean over items, not the mean of domain means
    assert domain_interval([("a", 1.0)] * 3 + [("b", 0.0)])["estimate"] == 0.75
    assert domain_interval([])["estimate"] is None
