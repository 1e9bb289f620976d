"""LLM synthesizer and LLM dependency check against the local SmolLM2-135M server.

    python benchmarks/bench_synth_llm.py                      # 3 small domains, bounded tokens
    python benchmarks/bench_synth_llm.py --url http://host:8000/v1 --model NAME --max-tokens 4096

Per domain: tokens (prompt, completion), LLM seconds, validation seconds (sandboxed), wall
seconds, rounds, outcome (llm = accepted LLM environment; fallback = rule-based environment with
the recorded reason). Then the dependency check per domain (llm decision or rules fallback).
Prints one JSON object with the per-domain rows, medians and the honest success rates. The
cache is off: every request reaches the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentscaler.llm import LLMClient  # noqa: E402
from agentscaler.models import Tool  # noqa: E402
from benchmarks.results_io import Figure, Recorder  # noqa: E402


def T(name: str, props: dict, req: list[str], desc: str) -> Tool:
    return Tool(name=name, source_name=name, source="bench", description=desc,
                parameters={"type": "object", "properties": props, "required": req}).with_id()


S = {"type": "string"}
DOMAINS = {
    "shop": [T("get_user", {"user_id": S}, ["user_id"], "Get a user's profile by id."),
             T("search_products", {"query": S}, ["query"], "Search products by name."),
             T("place_order", {"user_id": S, "product_id": S, "quantity": {"type": "integer", "minimum": 1}},
               ["user_id", "product_id"], "Place an order of a product for a user.")],
    "library": [T("find_book", {"title": S}, ["title"], "Find books whose title contains the text."),
                T("borrow_book", {"book_id": S, "member_id": S}, ["book_id", "member_id"], "Lend a book to a member."),
                T("return_book", {"loan_id": S}, ["loan_id"], "Return a borrowed book.")],
    "clinic": [T("list_doctors", {"specialty": S}, [], "List doctors, optionally by specialty."),
               T("book_appointment", {"doctor_id": S, "patient_id": S, "date": S}, ["doctor_id", "patient_id", "date"],
                 "Book an appointment with a doctor."),
               T("cancel_appointment", {"appointment_id": S}, ["appointment_id"], "Cancel an appointment.")],
}


def _edges(tools: list[Tool]) -> list[dict]:
    return [{"src": a.name, "dst": b.name, "kind": "similar", "weight": 0.5, "confirmed": True,
             "reason": "similar parameters"} for a, b in zip(tools, tools[1:])]


def run(url: str, model: str, args: argparse.Namespace) -> dict:
    from envs.sandbox import unsafe_from_env
    from tasks.discover.check import llm_dependency_check
    from tasks.environments.llm import synthesize_llm

    cfg = {"max_rounds": args.rounds, "max_tokens_tables": args.max_tokens, "max_tokens_code": args.max_tokens,
           "max_tokens_rows": args.max_tokens}
    rows, deps = [], []
    for name, tools in list(DOMAINS.items())[:args.domains]:
        client = LLMClient(url, model=model, timeout=600)
        t0 = time.perf_counter()
        syn = synthesize_llm(f"dbench{name}", tools, record={"name": name}, client=client, config=cfg,
                             unsafe=unsafe_from_env())
        wall = time.perf_counter() - t0
        rep = syn.spec.report["synth_llm"]
        rows.append({"domain": name, "tools": len(tools), "outcome": "llm" if syn.spec.synthesizer == "llm" else "fallback",
                     "rounds": rep["rounds"], "llm_calls": rep["llm_calls"], "prompt_tokens": rep["prompt_tokens"],
                     "completion_tokens": rep["completion_tokens"], "llm_s": rep["llm_s"],
                     "validate_s": rep["validate_s"], "wall_s": round(wall, 2),
                     "completion_tok_per_s": round(rep["completion_tokens"] / rep["llm_s"], 1) if rep["llm_s"] else None,
                     "errors_by_step": _count(e["step"] for e in rep["errors"]),
                     "first_error": rep["errors"][0]["error"][:160] if rep["errors"] else None})
        t0 = time.perf_counter()

        async def dep(tools=tools):
            async with LLMClient(url, model=model, timeout=600) as c:
                return await llm_dependency_check(c, tools, _edges(tools), max_tokens=args.max_tokens)

        res = asyncio.run(dep())
        deps.append({"domain": name, "by": res["by"], "wall_s": round(time.perf_counter() - t0, 2),
                     "completion_tokens": res["usage"].get("completion_tokens"),
                     "fallback_reason": (res.get("fallback_reason") or "")[:160] or None})
        asyncio.run(client.aclose())
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {"model": model, "config": cfg, "domains": rows,
            "synth_success_rate": f"{sum(r['outcome'] == 'llm' for r in rows)}/{len(rows)}",
            "median_wall_s": med("wall_s"), "median_completion_tokens": med("completion_tokens"),
            "median_prompt_tokens": med("prompt_tokens"),
            "dependency_check": deps,
            "dependency_llm_rate": f"{sum(d['by'] == 'llm' for d in deps)}/{len(deps)}"}


def _count(items) -> dict:
    out: dict = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=None, help="OpenAI-compatible base URL (default: start the local server)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--domains", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="1 domain, 1 round, 128 tokens")
    args = ap.parse_args()
    if args.quick:
        args.domains, args.rounds, args.max_tokens = 1, 1, 128
    with Recorder("synth_llm") as rec:
        if args.url:
            out = run(args.url, args.model, args)
        else:
            from agentscaler.llm_server import local_server

            with local_server(startup_timeout=180) as url:
                out = run(url, args.model, args)
    ok, n = (int(x) for x in out["synth_success_rate"].split("/"))
    wl = (f"real model: {args.model}, {n} small domains, {args.rounds} round(s), {args.max_tokens} max tokens"
          + (" (quick)" if args.quick else ""))
    rec.figures += [Figure(name="LLM synthesizer: domains accepted (not fallen back to rules)", value=ok,
                           unit=f"of {n}", workload=wl, aim="path works"),
                    Figure(name="LLM synthesizer: wall per domain", value=out["median_wall_s"], unit="s",
                           median=out["median_wall_s"], workload=wl)]
    rec.layers = ["static check of LLM-written code", "sandboxed validation"]
    rec.write("```json\n" + json.dumps(out, indent=1) + "\n```")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
