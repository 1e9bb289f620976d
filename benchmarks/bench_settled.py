"""Agent requests an evaluation spends after a trial's failure is settled, from a recorded run.

A rollout with `stop_when_failed` (tasks.rollouts.conversation.settled_failure) ends a conversation
once the verifier must fail it whatever follows: a malformed reply, or one call or one text-only
reply made 3 times. This script walks a finished run's recorded conversations (made without the
stop) through the same check at the same points the engine checks (after a malformed reply, after a
text-only reply, after a call's tool results) and counts the agent requests that came after the
first settled point: what the stop would have saved on that run. It also counts settled trials the
verifier passed, which must be none (the rule would be unsound otherwise).

Requests, not seconds: a trajectory records its agent LLM time in total, not per request.

    .venv/bin/python benchmarks/bench_settled.py --run-dir WS/rollouts/RUN [--run-dir WS/rollouts/RUN2 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results_io import Figure, Recorder  # noqa: E402
from tasks.rollouts.conversation import settled_failure  # noqa: E402
from tasks.verify.verify import has_call_markers  # noqa: E402


def malformed(m: dict[str, Any]) -> bool:
    """A recorded reply the verifier calls malformed on its face (the engine records an unparsable reply
    as its raw text, markers and all)."""
    content = m.get("content")
    return isinstance(content, str) and not m.get("tool_calls") and has_call_markers(content)


def settled_at(messages: list[dict[str, Any]]) -> tuple[int, int | None]:
    """(agent requests, the request after which the failure was settled, or None)."""
    requests, errors, at = 0, 0, None
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        requests += 1
        errors += malformed(m)
        nxt = messages[i + 1] if i + 1 < len(messages) else {}
        if m.get("tool_calls") and nxt.get("role") == "tool":
            end = i + 1  # the engine checks after the call's tool results
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
        else:
            end = i + 1
        if at is None and settled_failure(messages[:end], errors):
            at = requests
    return requests, at


def analyse(run_dir: Path) -> dict[str, Any]:
    trials = requests = after = settled = settled_passed = 0
    model = None
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        t = json.loads(line)
        model = model or t.get("agent_model")
        n, at = settled_at(t["messages"])
        trials += 1
        requests += n
        if at is not None:
            settled += 1
            after += n - at
            settled_passed += bool((t.get("verdict") or {}).get("passed"))
    return {"run": run_dir.name, "model": model, "trials": trials, "agent_requests": requests,
            "settled_trials": settled, "requests_after_settled": after, "settled_trials_passed": settled_passed,
            "share_saved": round(after / requests, 4) if requests else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", action="append", required=True, help="a finished rollout run (repeatable)")
    a = ap.parse_args()
    with Recorder("settled") as rec:
        rows = [analyse(Path(d)) for d in a.run_dir]
    lines = ["Recorded runs (made without the stop), walked through tasks.rollouts.conversation.settled_failure at "
             "the engine's check points.", "",
             "| run | model | trials | agent requests | settled trials | requests after settled | share saved | "
             "settled trials the verifier passed |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['model']} | {r['trials']} | {r['agent_requests']} | {r['settled_trials']} | "
                     f"{r['requests_after_settled']} | {100 * (r['share_saved'] or 0):.1f}% | {r['settled_trials_passed']} |")
        rec.figures.append(Figure(
            name=f"agent requests after a settled failure, {r['model']}", value=100 * (r["share_saved"] or 0),
            unit="% of requests", workload=f"real: recorded run {r['run']}, {r['trials']} trials, "
                                           f"{r['agent_requests']} agent requests ({r['settled_trials']} trials settled)"))
    rec.layers = ["none: recorded conversations, nothing runs"]
    print(json.dumps(rows, indent=1))
    rec.write("\n".join(lines))


if __name__ == "__main__":
    main()
