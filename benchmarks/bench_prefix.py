"""Per-request cost of evaluation requests on the local llama.cpp server: before vs after prefix reuse.

Issue 19 measured 15.6 s per request on held-out single-call scenarios of the demo workspace
(SmolLM2-135M, local server, forced tool call), almost all of it prompt processing: the domain's
system prompt and tool schemas, the same for every scenario of a domain. The evaluation used to
start conversations round-robin over domains (select_scenarios' order), so each request's prompt
shared nothing with the one before and the server's one slot evaluated it whole; now it starts them
grouped by domain (tasks.rollouts.engine.by_domain), one at a time, so the KV cache serves the prefix.

This script sends the same requests (one per held-out single-call scenario and trial: system prompt
+ intent, the domain's tools, tool_choice="required") to one server in both orders, side by side in
one run (arms alternate when --repeats > 1), and reports per arm: median and mean latency, prompt
tokens evaluated vs served from the cache (the server's timings), and schema-valid calls.

    .venv/bin/python benchmarks/bench_prefix.py --workspace WS [--domains 10] [--per-domain 3] [--trials 1]
        [--threads N] [--out benchmarks/results/prefix.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentscaler.chat_template import render  # noqa: E402
from agentscaler.llm import LLMClient, LLMFormatError  # noqa: E402
from agentscaler.llm_server import default_model_path, local_server  # noqa: E402
from agentscaler.schemas import check  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from benchmarks.results_io import Anchor, Figure, Recorder  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from tasks.rollouts.agent import domain_setup  # noqa: E402
from tasks.rollouts.engine import by_domain, select_scenarios  # noqa: E402


def pick(ws: Workspace, domains: int, per_domain: int, max_prompt: int, tokenize: Any) -> tuple[list[Any], dict]:
    """Held-out single-call scenarios in the evaluation's order (round-robin over domains), at most
    `per_domain` from each of the first `domains` domains whose prompt fits `max_prompt` tokens."""
    setup: dict[str, tuple[list[dict], str, int]] = {}
    chosen: list[Any] = []
    skipped = 0
    for s in select_scenarios(ws, "heldout"):
        if len(s.gold_calls) != 1:
            continue
        if s.domain not in setup:
            spec = DomainSpec.load(ws.domain_dir(s.domain))
            tools, system = domain_setup(spec)
            n = len(tokenize(render([{"role": "system", "content": system}, {"role": "user", "content": s.intent}],
                                    tools)))
            setup[s.domain] = (tools, system, n)
        tools, system, n = setup[s.domain]
        if n > max_prompt:
            skipped += 1
            continue
        mine = [c for c in chosen if c.domain == s.domain]
        if len(mine) < per_domain and (mine or len({c.domain for c in chosen}) < domains):
            chosen.append(s)
    return chosen, {"setup": setup, "skipped_too_long": skipped}


async def run_arm(client: LLMClient, order: list[Any], setup: dict, trials: int) -> dict[str, Any]:
    lat, evaluated, reused, prompt_s = [], [], [], []
    valid = invalid = cut = 0
    t0 = time.perf_counter()
    for s in order:
        tools, system, _ = setup[s.domain]
        schemas = {t["function"]["name"]: t["function"].get("parameters") for t in tools}
        messages = [{"role": "system", "content": system}, {"role": "user", "content": s.intent}]
        for k in range(trials):
            t = time.perf_counter()
            try:
                reply = await client.chat(messages, tools=tools, tool_choice="required", max_tokens=64,
                                          temperature=0.7 if trials > 1 else 0.0, seed=k, use_cache=False,
                                          stage="bench")
            except LLMFormatError:  # a forced call cut off at max_tokens (its timings are lost with it)
                lat.append(time.perf_counter() - t)
                cut += 1
                timings = {}
            else:
                lat.append(reply.latency_s)
                timings = reply.raw.get("timings") or {}
                for c in reply.tool_calls:
                    ok = c["name"] in schemas and check(schemas[c["name"]]).is_valid(c["arguments"])
                    valid += ok
                    invalid += not ok
            if timings:
                evaluated.append(timings.get("prompt_evaluated", 0))
                reused.append(timings.get("prompt_reused", 0))
                prompt_s.append(timings.get("prompt_s", 0.0))
    return {"requests": len(lat), "wall_s": round(time.perf_counter() - t0, 1),
            "median_s": round(statistics.median(lat), 3), "mean_s": round(statistics.fmean(lat), 3),
            "prompt_tokens_evaluated": sum(evaluated), "prompt_tokens_reused": sum(reused),
            "median_prompt_s": round(statistics.median(prompt_s), 3) if prompt_s else None,
            "valid_calls": valid, "invalid_calls": invalid, "cut_off": cut}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=os.environ.get("AGENTSCALER_WORKSPACE", "workspace"))
    ap.add_argument("--domains", type=int, default=10)
    ap.add_argument("--per-domain", type=int, default=3)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="before/after pairs (arms alternate)")
    ap.add_argument("--threads", type=int, default=None,
                    help="decode and prompt threads (default: the server's own, 1 decode thread and one prompt thread "
                         "per core; two decode threads on a loaded 2-core machine decode 20-30x slower)")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--model", default=None, help="GGUF (default: the shipped SmolLM2-135M Q4_1)")
    ap.add_argument("--out", default=None, help="append a markdown section to this file")
    a = ap.parse_args()
    from llama_cpp import Llama  # the [llm] extra: the server's own tokenizer, to size prompts

    model = Path(a.model) if a.model else default_model_path()
    vocab = Llama(str(model), vocab_only=True, verbose=False)
    tokenize = lambda text: vocab.tokenize(text.encode(), add_bos=False, special=True)  # noqa: E731
    ws = Workspace(a.workspace)
    chosen, info = pick(ws, a.domains, a.per_domain, a.n_ctx - 64 - 8, tokenize)
    before = chosen  # the evaluation's old order: round-robin over domains
    after = by_domain(chosen)
    with Recorder("prefix") as rec:
        load0 = os.getloadavg()
        arms: dict[str, list[dict[str, Any]]] = {"before (round-robin)": [], "after (grouped by domain)": []}
        with local_server(model, n_threads=a.threads, n_ctx=a.n_ctx, startup_timeout=300) as url:
            async def go() -> None:
                async with LLMClient(url, concurrency=1, timeout=900, max_retries=0) as client:
                    for _ in range(a.repeats):
                        arms["before (round-robin)"].append(await run_arm(client, before, info["setup"], a.trials))
                        arms["after (grouped by domain)"].append(await run_arm(client, after, info["setup"], a.trials))
            asyncio.run(go())
        load1 = os.getloadavg()
    prompt_sizes = [info["setup"][d][2] for d in {s.domain for s in chosen}]
    out = {"model": str(model.name), "threads": a.threads, "n_ctx": a.n_ctx, "scenarios": len(chosen),
           "domains": len({s.domain for s in chosen}), "trials": a.trials,
           "prompt_tokens_median": statistics.median(prompt_sizes) if prompt_sizes else None,
           "skipped_too_long": info["skipped_too_long"], "load_before": [round(x, 2) for x in load0],
           "load_after": [round(x, 2) for x in load1], "arms": arms}
    b = statistics.median(r["median_s"] for r in arms["before (round-robin)"])
    f = statistics.median(r["median_s"] for r in arms["after (grouped by domain)"])
    out["median_ratio"] = round(b / f, 2) if f else None
    print(json.dumps(out, indent=1))
    rec.figures.append(Figure(
        name="per-request cost, grouped by domain (prefix reuse)", value=f, unit="s", median=f,
        workload=f"real: {out['scenarios']} held-out single-call scenarios of {out['domains']} domains, "
                 f"{out['model']}, forced tool call", ratio_to_anchor=round(f / b, 3) if b else None,
        anchor=Anchor(value=b, unit="s", kind="measured", source="the old round-robin order, same run, arms alternating"),
        aim="4x cheaper (issue 19)", meets_aim=bool(f and b / f >= 4)))
    rec.layers = ["none: no tool code runs here"]
    rec.write("```json\n" + json.dumps({k: v for k, v in out.items() if k != "arms"}, indent=1) + "\n```")
    if a.out:
        lines = [f"\n## {time.strftime('%Y-%m-%d %H:%M')} — {out['scenarios']} held-out single-call scenarios from "
                 f"{out['domains']} domains x {a.trials} trial(s), forced tool call, {out['model']}, threads {a.threads or 'server default'}"
                 f", n_ctx {a.n_ctx}", "",
                 f"Load average (1/5/15 min) {out['load_before']} before, {out['load_after']} after; median domain "
                 f"prompt {out['prompt_tokens_median']} tokens; {out['skipped_too_long']} scenarios skipped (prompt "
                 f"over the context).", "",
                 "| arm | requests | median s | mean s | prompt tokens evaluated | served from cache | median prompt s "
                 "| valid calls | invalid | cut off |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, runs in arms.items():
            for r in runs:
                lines.append(f"| {name} | {r['requests']} | {r['median_s']} | {r['mean_s']} | "
                             f"{r['prompt_tokens_evaluated']} | {r['prompt_tokens_reused']} | {r['median_prompt_s']} "
                             f"| {r['valid_calls']} | {r['invalid_calls']} | {r['cut_off']} |")
        lines += ["", f"Median per-request cost, before / after: **{out['median_ratio']}x**.", ""]
        with open(a.out, "a") as fh:
            fh.write("\n".join(lines))


if __name__ == "__main__":
    main()
