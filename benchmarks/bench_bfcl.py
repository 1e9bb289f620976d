"""BFCL accuracy of the local SmolLM2-135M, tool_choice "auto" (BFCL's setting) beside "required", one run.

    .venv/bin/python benchmarks/bench_bfcl.py              # simple_python, first 40 questions
    .venv/bin/python benchmarks/bench_bfcl.py --quick      # simple_python, first 8 questions
    .venv/bin/python benchmarks/bench_bfcl.py --category simple_python --limit 100 --url http://host:8000/v1

The questions go through tasks/evaluation/bfcl.run_bfcl (native tool calling, one turn, BFCL's AST
matcher), the same code as `agentscaler evaluate --bfcl`; no response cache, so every answer is asked.
Results: benchmarks/results/bfcl.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentscaler.llm import LLMClient  # noqa: E402
from agentscaler.llm_server import local_server  # noqa: E402
from benchmarks.results_io import Anchor, Figure, Recorder  # noqa: E402
from tasks.evaluation.bfcl import run_bfcl_async  # noqa: E402


async def both(url: str, model: str, category: str, limit: int) -> dict[str, dict]:
    async with LLMClient(url, model=model, timeout=600) as client:
        return {choice: await run_bfcl_async(client, category, limit=limit,
                                             tool_choice=None if choice == "auto" else choice)
                for choice in ("auto", "required")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 questions")
    ap.add_argument("--category", default="simple_python")
    ap.add_argument("--limit", type=int, default=None, help="first N questions (default 40, quick 8)")
    ap.add_argument("--url", default=None, help="OpenAI-compatible base URL (default: start the local server)")
    ap.add_argument("--model", default="smollm2-135m")
    a = ap.parse_args()
    limit = a.limit or (8 if a.quick else 40)
    with Recorder("bfcl") as rec:
        if a.url:
            out = asyncio.run(both(a.url, a.model, a.category, limit))
        else:
            with local_server(startup_timeout=300) as url:
                out = asyncio.run(both(url, a.model, a.category, limit))
    wl = (f"real: BFCL v4 {a.category}, first {limit} questions, {a.model}"
          + (" on the local llama.cpp server" if not a.url else f" at {a.url}") + (" (quick)" if a.quick else ""))
    auto, req = out["auto"], out["required"]
    rec.figures.append(Figure(name=f"BFCL {a.category}, tool_choice auto (BFCL's setting)", value=auto["correct"],
                              unit=f"of {auto['items']}", workload=wl))
    rec.figures.append(Figure(name=f"BFCL {a.category}, tool_choice required (a forced call)", value=req["correct"],
                              unit=f"of {req['items']}", workload=wl,
                              anchor=Anchor(value=auto["correct"], unit=f"of {auto['items']}", kind="measured",
                                            source="tool_choice auto, same questions, same run")))
    rec.layers = ["none: no tool code runs (BFCL's AST matcher scores the calls)"]
    rec.notes.append(f"wall: auto {auto['wall_s']} s, required {req['wall_s']} s; transport errors: "
                     f"auto {len(auto['transport_errors'])}, required {len(req['transport_errors'])}")
    lines = ["| tool_choice | correct | items | errors by type | wall s |", "|---|---|---|---|---|"]
    lines += [f"| {c} | {r['correct']} | {r['items']} | {r['errors']} | {r['wall_s']} |" for c, r in out.items()]
    summary = {c: {k: v for k, v in r.items() if k != "results"} for c, r in out.items()}
    print(rec.write("\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in rec.notes) + "\n\n```json\n"
                    + json.dumps(summary, indent=1) + "\n```"))


if __name__ == "__main__":
    main()
