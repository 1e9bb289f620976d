"""Two evaluations of the same scenarios side by side: base vs trained, with intervals and where it fails.

Input: two `reports/eval-<run>.json` (tasks.evaluation.evaluate), scored on the same evaluation set.
Output of `compare`: per group (overall, single-call, multi-call) and k, each model's pass^k with
its 95% bootstrap interval, whether the intervals overlap, and the paired difference (trained -
base, scenarios resampled together) with its interval; pass^1 and failure reasons by scenario
length; the diagnostics (tried a call, right first tool, right first call); and the issue's aim
(trained beats base by >= 10 points of pass^1, intervals apart). `markdown` renders it.
"""

from __future__ import annotations

from typing import Any

from tasks.evaluation.intervals import overlap, paired_difference

GROUP_NAMES = {"overall": "all scenarios", "single_call": "single-call", "multi_call": "multi-call"}
AIM_POINTS = 0.10


def _pairs(counts: dict[str, Any] | None) -> dict[str, tuple[int, int]]:
    """Per-scenario [trials, passed] (as JSON keeps them) as int pairs."""
    return {key: (int(n), int(c)) for key, (n, c) in (counts or {}).items()}


def _counts(report: dict[str, Any], group: str) -> dict[str, tuple[int, int]]:
    return _pairs((report.get("scenario_counts") or {}).get(group))


def compare(base: dict[str, Any], trained: dict[str, Any], k: int | None = None) -> dict[str, Any]:
    """The side-by-side record of two evaluations (see the module docstring)."""
    k = k or min(int(base.get("k") or 1), int(trained.get("k") or 1))
    groups: dict[str, Any] = {}
    for g in GROUP_NAMES:
        rows = {}
        for j in range(1, k + 1):
            b = base["intervals"][g]["pass^k"].get(str(j)) or {}
            t = trained["intervals"][g]["pass^k"].get(str(j)) or {}
            rows[str(j)] = {"base": b, "trained": t, "overlap": overlap(b, t),
                            "difference": paired_difference(_counts(base, g), _counts(trained, g), j)}
        groups[g] = {"scenarios": base["intervals"][g]["scenarios"], "pass^k": rows}
    lengths = sorted(set(base["intervals"]["by_length"]) | set(trained["intervals"]["by_length"]), key=int)
    by_length = {n: {side: {"scenarios": (rep["intervals"]["by_length"].get(n) or {}).get("scenarios", 0),
                            "pass^1": ((rep["intervals"]["by_length"].get(n) or {}).get("pass^k") or {}).get("1"),
                            "reasons": (rep["intervals"]["by_length"].get(n) or {}).get("reasons", {})}
                     for side, rep in (("base", base), ("trained", trained))} for n in lengths}
    one = groups["overall"]["pass^k"]["1"]
    gain = (one["trained"].get("estimate") or 0.0) - (one["base"].get("estimate") or 0.0)
    return {"k": k, "base_run": base.get("run_id"), "trained_run": trained.get("run_id"),
            "base_model": base.get("model"), "trained_model": trained.get("model"),
            "same_scenarios": bool(base.get("scenario_ids")) and base.get("scenario_ids") == trained.get("scenario_ids"),
            "groups": groups, "by_length": by_length,
            "diagnostics": {"base": base.get("diagnostics"), "trained": trained.get("diagnostics"),
                            "trials": {"base": base.get("verified"), "trained": trained.get("verified")}},
            "reasons": {"base": base.get("reasons"), "trained": trained.get("reasons")},
            "aim": {"pass^1_gain": round(gain, 6), "gain_at_least_10_points": gain >= AIM_POINTS,
                    "intervals_apart": one["overlap"] is False and gain > 0,
                    "met": gain >= AIM_POINTS and one["overlap"] is False}}


def curve_differences(curve: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Whether a scaling curve rises beyond its noise: pass^1 paired differences (the same scenarios
    resampled together) of each trained point against the one before it, and of the widest against the
    narrowest. Points are flows.closed_loop scaling points in domain order, with their per-scenario
    `scenario_counts`; None when fewer than two trained points have them. The verdict: "rises" when the
    widest beats the narrowest with an interval above 0 and no step falls with one below 0; "falls"
    when the widest loses to the narrowest that way; else "mixed" (a step falls) or "flat" (no
    difference beyond the intervals)."""
    trained = [p for p in curve if p.get("domains") and p.get("scenario_counts")]
    if len(trained) < 2:
        return None

    def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"from": a["label"], "to": b["label"],
                **paired_difference(_pairs(a["scenario_counts"]), _pairs(b["scenario_counts"]), 1)}

    steps = [diff(a, b) for a, b in zip(trained, trained[1:])]
    span = diff(trained[0], trained[-1])
    falls = any(s["excludes_zero"] and s["estimate"] < 0 for s in steps)
    if span["excludes_zero"] and span["estimate"] > 0 and not falls:
        verdict = "rises"
    elif span["excludes_zero"] and span["estimate"] < 0:
        verdict = "falls"
    else:
        verdict = "mixed" if falls else "flat"
    return {"steps": steps, "span": span, "verdict": verdict}


def setting_differences(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two curves of the same checkpoints evaluated two ways (another decoding or evaluation setting,
    nothing trained again): per point both evaluate, its pass^1 under each and the paired difference
    after - before on the scenarios both scored. Points pair by label and must name the same model
    (checkpoint); those that do not, or lack per-scenario counts, are left out."""
    by_label = {p["label"]: p for p in before}
    out = []
    for b in after:
        a = by_label.get(b["label"])
        if a is None or a.get("model") != b.get("model") or not a.get("scenario_counts") or not b.get("scenario_counts"):
            continue
        out.append({"label": b["label"], "model": b.get("model"), "before": a["pass^1"], "after": b["pass^1"],
                    "difference": paired_difference(_pairs(a["scenario_counts"]), _pairs(b["scenario_counts"]), 1),
                    "diagnostics": {"before": a.get("diagnostics"), "after": b.get("diagnostics")}})
    return out


def points(x: Any) -> str:
    """A rate in percentage points, one decimal ("n/a" for None)."""
    return "n/a" if x is None else f"{100 * float(x):.1f}"


def interval_text(iv: dict[str, Any] | None) -> str:
    """"estimate [low, high]" in percentage points."""
    if not iv or iv.get("estimate") is None:
        return "n/a"
    return f"{points(iv['estimate'])} [{points(iv['low'])}, {points(iv['high'])}]"


def markdown(cmp: dict[str, Any], base_label: str = "base", trained_label: str = "trained") -> str:
    """Tables: pass^k with intervals per group, paired differences, by length, diagnostics."""
    lines = [f"pass^k in percent, 95% bootstrap interval over scenarios in brackets; difference = {trained_label} - "
             f"{base_label} on the same scenarios (paired bootstrap).", "",
             f"| scenarios | k | {base_label} | {trained_label} | intervals overlap | difference |",
             "|---|---|---|---|---|---|"]
    for g, name in GROUP_NAMES.items():
        block = cmp["groups"][g]
        for j, row in block["pass^k"].items():
            lines.append(f"| {name} ({block['scenarios']}) | {j} | {interval_text(row['base'])} | {interval_text(row['trained'])} "
                         f"| {'n/a' if row['overlap'] is None else ('yes' if row['overlap'] else 'no')} "
                         f"| {interval_text(row['difference'])} |")
    lines += ["", "pass^1 and failure reasons by scenario length (gold calls):", "",
              f"| gold calls | scenarios | {base_label} pass^1 | {trained_label} pass^1 | {base_label} failures "
              f"| {trained_label} failures |", "|---|---|---|---|---|---|"]
    for n, sides in cmp["by_length"].items():
        b, t = sides["base"], sides["trained"]
        lines.append(f"| {n} | {b['scenarios']} | {interval_text(b['pass^1'] or {})} | {interval_text(t['pass^1'] or {})} "
                     f"| {_reasons(b['reasons'])} | {_reasons(t['reasons'])} |")
    d = cmp["diagnostics"]
    trials = d.get("trials") or {}
    lines += ["", "How far the agent got (trials):", "",
              "| model | trials | tried a tool call | well-formed call | right first tool | right first call |",
              "|---|---|---|---|---|---|"]
    for side, label in (("base", base_label), ("trained", trained_label)):
        x = d.get(side) or {}
        lines.append(f"| {label} | {trials.get(side)} | {x.get('tried_call')} | {x.get('well_formed_call')} "
                     f"| {x.get('right_first_tool')} | {x.get('right_first_call')} |")
    text = [(d.get(side) or {}).get("text_match_first_tool") for side in ("base", "trained")]
    if None not in text:
        lines += ["", f"A bag-of-words picker with no model (tasks.evaluation.evaluate.text_match_tool: the user's "
                      f"first message against the tools' names and descriptions) names the first gold tool in {text[0]} "
                      f"of the base model's {trials.get('base')} trials and {text[1]} of the trained model's "
                      f"{trials.get('trained')}."]
    args = {side: (d.get(side) or {}).get("first_call_arguments") for side in ("base", "trained")}
    if any(args.values()):
        kinds = list(next(a for a in args.values() if a))  # in evaluate.ARGUMENT_ERRORS' order, as counted
        lines += ["", "First calls with the right tool but other arguments than gold's, by what was wrong (a call can "
                  "be wrong in several ways):", "", "| model | " + " | ".join(k.replace("_", " ") for k in kinds) + " |",
                  "|---|" + "---|" * len(kinds)]
        for side, label in (("base", base_label), ("trained", trained_label)):
            lines.append(f"| {label} | " + " | ".join("n/a" if args[side] is None else str(args[side].get(k, 0))
                                                      for k in kinds) + " |")
    aim = cmp["aim"]
    lines += ["", f"Aim (>= 10 points of held-out pass^1, intervals apart): gain {points(aim['pass^1_gain'])} points, "
                  f"intervals {'apart' if aim['intervals_apart'] else 'overlap'}: **{'met' if aim['met'] else 'not met'}**."]
    return "\n".join(lines) + "\n"


def _reasons(r: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (r or {}).items()) or "-"
