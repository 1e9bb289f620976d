"""tau2 runtime equivalence and evaluator agreement as figures: what the tests assert, counted.

    .venv/bin/python benchmarks/bench_tau2_agreement.py            # both domains, every recorded call,
                                                                   # every write scenario's action sequences
    .venv/bin/python benchmarks/bench_tau2_agreement.py --quick    # airline calls only, 3 scenarios per domain

Runtime equivalence (envs/tau2/equivalence.py, asserted by tests/envs/test_tau2_equivalence.py): every
recorded call (tau2's gold actions, seeded reads, error cases) on tau2's own tools and on our sandboxed
SQLite domain; a call is equal when both agree on success, on the result or error text, and (after a
write) on the rows it names. Evaluator agreement (tasks/evaluation/tau2.agreement, asserted by
tests/tasks/evaluation/test_tau2.py): our DB verdict vs tau2's EnvironmentEvaluator on the gold action
sequence of tau2's write tasks and on wrong variants of it (last write dropped, an argument mutated,
reads only). Results: benchmarks/results/tau2_agreement.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results_io import Figure, Recorder  # noqa: E402
from envs.tau2.build import build_tau2_domain  # noqa: E402
from envs.tau2.equivalence import DOMAINS, compare_recorded_calls  # noqa: E402
from envs.tau2.tasks import tau2_scenarios  # noqa: E402
from tasks.evaluation.tau2 import agreement  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bounded run: airline's calls, 3 write scenarios per domain")
    ap.add_argument("--sample", type=int, default=None, help="write scenarios per domain (default: all; quick: 3)")
    a = ap.parse_args()
    call_domains = ["airline"] if a.quick else DOMAINS
    sample = a.sample or (3 if a.quick else None)
    mode = "quick: airline's recorded calls, 3 write scenarios per domain" if a.quick else "full"
    equal, agree = {}, {}
    with Recorder("tau2_agreement") as rec, tempfile.TemporaryDirectory() as tmp:
        rec.layers = ["our side: the sandboxed envs.episode.Environment (worker process)",
                      "tau2 side: tau2's own tools and EnvironmentEvaluator in this process (trusted upstream wheel)"]
        for d in DOMAINS:
            ddir = Path(tmp) / d
            build_tau2_domain(d, ddir)
            if d in call_domains:
                equal[d] = compare_recorded_calls(d, ddir)
                print(d, {k: v for k, v in equal[d].items() if k != "mismatches"}, flush=True)
            scenarios, _ = tau2_scenarios(d, ddir)
            writes = [s for s in scenarios if not s.read_only]
            agree[d] = agreement(d, ddir, writes, sample=sample or len(writes), seed=0)
            agree[d]["scenarios"] = min(sample or len(writes), len(writes))
            print(d, {k: v for k, v in agree[d].items() if k not in ("rows", "disagreements")}, flush=True)
    work = f"real: tau2-bench's airline/retail data and tasks ({mode})"
    calls = sum(e["calls"] for e in equal.values())
    rec.figures.append(Figure(name="tau2 runtime equivalence: recorded calls equal to tau2's own tools",
                              value=sum(e["equal"] for e in equal.values()), unit=f"of {calls:,} calls", workload=work,
                              aim="all", meets_aim=all(e["equal"] == e["calls"] and not e["mismatch_count"]
                                                       for e in equal.values())))
    for d, e in equal.items():
        rec.figures.append(Figure(name=f"tau2 runtime equivalence, {d} ({e['writes_ok']} writes, {e['errors']} "
                                       f"error cases)", value=e["equal"], unit=f"of {e['calls']:,} calls", workload=work))
    cases = sum(r["cases"] for r in agree.values())
    rec.figures.append(Figure(name="evaluator agreement with tau2's EnvironmentEvaluator (action sequences)",
                              value=sum(r["agree"] for r in agree.values()), unit=f"of {cases} sequences", workload=work,
                              aim="all", meets_aim=all(r["agree"] == r["cases"] for r in agree.values())))
    for d, r in agree.items():
        rec.figures.append(Figure(name=f"evaluator agreement, {d} ({r['scenarios']} write tasks; tau2 passes "
                                       f"{r['tau2_pass']}, ours {r['ours_pass']})", value=r["agree"],
                                  unit=f"of {r['cases']} sequences", workload=work))
    rec.notes.append(mode)
    lines = ["| domain | calls | equal | ok / errors | writes (state checked) | mismatches |", "|---|---|---|---|---|---|"]
    lines += [f"| {d} | {e['calls']} | {e['equal']} | {e['ok']} / {e['errors']} | {e['writes_ok']} ({e['state_checks']}) "
              f"| {e['mismatch_count']} |" for d, e in equal.items()]
    lines += ["", "| domain | write tasks | sequences | agree | tau2 passes | ours passes |", "|---|---|---|---|---|---|"]
    lines += [f"| {d} | {r['scenarios']} | {r['cases']} | {r['agree']} | {r['tau2_pass']} | {r['ours_pass']} |"
              for d, r in agree.items()]
    for d in equal:
        lines += [f"- {d} mismatch: {m}" for m in equal[d]["mismatches"]]
    for d in agree:
        lines += [f"- {d} disagreement: {r}" for r in agree[d]["disagreements"][:20]]
    print(rec.write("\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in rec.notes) + "\n"))


if __name__ == "__main__":
    main()
