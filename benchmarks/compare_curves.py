"""Two scaling curves of the same checkpoints, evaluated two ways, point by point.

For a change of decoding or evaluation setting, nothing trained again: each point's held-out pass^1
under both settings and the paired difference (the same scenarios resampled together;
tasks.evaluation.compare.setting_differences), with the right first tool and call of each. Points
pair by label and must name the same checkpoint.

    .venv/bin/python benchmarks/compare_curves.py BEFORE AFTER --name NAME

BEFORE, AFTER: stems of results files in benchmarks/results/ (closed_loop.py --domains ... --name);
writes benchmarks/results/NAME.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

from results_io import short_sha  # noqa: E402

from tasks.evaluation.compare import interval_text, setting_differences  # noqa: E402
from tasks.evaluation.report import penalty_text  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def markdown(before: str, after: str, b: dict, a: dict, rows: list[dict]) -> str:
    lines = [f"# {after} against {before}: the same checkpoints, evaluated two ways", "",
             f"Held-out pass^1 (in percent, 95% bootstrap interval over scenarios) of each point of `{before}.md` "
             f"(the agent at {penalty_text(b['config'])}) and of `{after}.md` (the agent at {penalty_text(a['config'])}); "
             "difference = after - before on the same scenarios, resampled together. Nothing was trained again: each "
             "row is one checkpoint.", "",
             "| train domains | before | after | difference | right first tool (before -> after) "
             "| right first call (before -> after) |", "|---|---|---|---|---|---|"]
    for r in rows:
        d0, d1 = r["diagnostics"]["before"] or {}, r["diagnostics"]["after"] or {}
        lines.append(f"| {r['label']} | {interval_text(r['before'])} | {interval_text(r['after'])} "
                     f"| {interval_text(r['difference'])} | {d0.get('right_first_tool')} -> {d1.get('right_first_tool')} "
                     f"| {d0.get('right_first_call')} -> {d1.get('right_first_call')} |")
    missing = sorted({p["label"] for p in b["points"]} - {r["label"] for r in rows})
    if missing:
        lines += ["", f"Not compared: {', '.join(missing)} (not measured after, or another checkpoint)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    b, a = (json.loads((RESULTS / f"{stem}.json").read_text()) for stem in (args.before, args.after))
    rows = setting_differences(b["points"], a["points"])
    md = markdown(args.before, args.after, b, a, rows)
    md += f"\nWritten {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {short_sha('HEAD')} from the two results files.\n"
    (RESULTS / f"{args.name}.md").write_text(md)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"before": args.before, "after": args.after, "rows": rows},
                                                          indent=1, default=str))
    print(md)


if __name__ == "__main__":
    main()
