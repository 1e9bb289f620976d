"""Tool choice on held-out scenarios, by likelihood: the base model and each point of a scaling curve.

Held-out pass^1 on 100 trials has a +-9-point interval, and the trained models lose most trials at
the first tool. This scores that one decision (tasks.evaluation.tool_choice: which of the domain's
tools the model's probabilities favour as its first call) on every held-out scenario of the
workspace whose domain no train scenario shares, for the base model and the checkpoints of a curve,
on the same items. Intervals resample domains (intervals.domain_interval). Beside each model: a
bag-of-words picker with no model (text_match_tool) and chance (1 / the number of tools).

    .venv/bin/python benchmarks/tool_choice.py --workspace WS --curve c120 --name tool_choice_nosess

--curve c120 scores <ws>/closed_loop/scaling-<n>-c120/model/final for every n there, in order of n.
Rows per model go to <ws>/reports/tool_choice/<model key>.jsonl and are reused when the items, the
dtype and the checkpoint are the same (a rerun scores only what is new). Writes
benchmarks/results/NAME.{md,json}. This is a measure of the choice a model would make if it called a
tool at once; it is not pass^1 and is never reported as pass^1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

from results_io import RESULTS, machine, short_sha  # noqa: E402

from agentscaler.artifacts import load_scenarios  # noqa: E402
from agentscaler.hashing import content_hash  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from flows.closed_loop import base_checkpoint, model_key  # noqa: E402
from tasks.evaluation.compare import interval_text  # noqa: E402
from tasks.evaluation.intervals import domain_interval  # noqa: E402
from tasks.evaluation.eval_set import eval_set_path, prompt_tokens  # noqa: E402
from tasks.evaluation.tool_choice import choice_items, score_domain  # noqa: E402
from tasks.rollouts.agent import domain_setup  # noqa: E402
from training.gguf_convert import load_tokenizer  # noqa: E402


def curve_models(ws: Workspace, curve: str) -> list[tuple[str, Path]]:
    """(label, checkpoint) for the base model and every trained point of the curve, by domain count."""
    found = []
    for d in (ws.root / "closed_loop").glob(f"scaling-*-{curve}"):
        m = re.fullmatch(rf"scaling-(\d+)-{re.escape(curve)}", d.name)
        if m and (d / "model" / "final" / "config.json").exists():
            found.append((int(m.group(1)), d / "model" / "final"))
    return [("0 (base)", base_checkpoint(ws, "smollm2-135m"))] + [(str(n), p) for n, p in sorted(found)]


def scored_rows(ws: Workspace, label: str, path: Path, items: list, tools: dict, systems: dict, dtype: str,
                threads: int) -> tuple[list[dict[str, Any]], float]:
    """The model's rows on `items`, domain by domain: a domain whose rows are on file for the same
    checkpoint, dtype and items is read back, the rest scored now and written (so a stopped run goes
    on where it was, and a changed item set rescores only the domains it changed)."""
    import torch

    folder = ws.root / "reports" / "tool_choice" / f"{model_key(path.parent) or content_hash(str(path), 12)}-{dtype}"
    folder.mkdir(parents=True, exist_ok=True)
    by: dict[str, list] = {}
    for it in items:
        by.setdefault(it.domain, []).append(it)
    model = tok = None
    rows: list[dict[str, Any]] = []
    timings = folder / "seconds.json"  # scoring seconds per domain file, so a cached rerun still reports them
    spent = json.loads(timings.read_text()) if timings.exists() else {}
    files = {d: folder / f"{d}-{content_hash([i.model_dump() for i in by[d]], 12)}.jsonl" for d in by}
    for d, f in sorted(files.items()):
        if f.exists():
            rows += [json.loads(line) for line in f.read_text().splitlines()]
            continue
        if model is None:
            from transformers import AutoModelForCausalLM

            torch.set_num_threads(threads)
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype),
                                                         attn_implementation="sdpa").eval()
            tok = load_tokenizer()
        started = time.perf_counter()
        got = score_domain(model, tok, systems[d], tools[d], by[d])
        spent[f.name] = round(time.perf_counter() - started, 2)
        f.write_text("".join(json.dumps(r) + "\n" for r in got))
        timings.write_text(json.dumps(spent, indent=1))
        rows += got
    seconds = sum(spent.get(f.name, 0.0) for f in files.values())
    print(f"[tool-choice] {label}: {sum(r['right'] for r in rows)} of {len(rows)} right, {seconds:.0f} s scoring",
          flush=True)
    return rows, seconds


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"right": domain_interval([(r["domain"], float(r["right"])) for r in rows]),
            "gold_prob": round(sum(r["gold_prob"] for r in rows) / len(rows), 4),
            "gold_rank": round(sum(r["gold_rank"] for r in rows) / len(rows), 3),
            "by_tools": {b: domain_interval([(r["domain"], float(r["right"])) for r in rows if bucket(r["n_tools"]) == b])
                         for b in BUCKETS}}


BUCKETS = ("2-5", "6-9", "10+")


def bucket(n: int) -> str:
    return "2-5" if n <= 5 else "6-9" if n <= 9 else "10+"


def scored_in(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds else "not recorded"


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """b - a (right first tool) on the same items, resampled by domain."""
    at = {r["scenario_id"]: r for r in a}
    return domain_interval([(r["domain"], float(r["right"]) - float(at[r["scenario_id"]]["right"]))
                            for r in b if r["scenario_id"] in at])


def markdown(out: dict[str, Any]) -> str:
    ref = out["reference"]
    cap = f", at most {out['per_domain']} a domain" if out["per_domain"] else ""
    lines = [f"# {out['name']}: first-tool choice by likelihood, held-out scenarios", "",
             f"Workspace `{out['workspace']}`, curve `{out['curve']}`: {out['items']} held-out scenarios in "
             f"{out['domains']} domains that no train scenario shares and whose system turn fits in "
             f"{out['max_prompt_tokens']} tokens, as the evaluation set's do ({out['domains_over_prompt_limit']} held-out "
             f"domains do not){cap}; the evaluation set's scenarios are all in (skipped: {out['skipped'] or 'none'}). "
             "For each scenario the agent's prompt (system prompt, the domain's tools, the user's first message) is "
             "followed by the opening of a tool call, and the model's pick is the tool whose name it gives the "
             "highest log-probability. This is the choice the model would make if it called a tool at once: it is "
             f"not pass^1. Weights in {out['dtype']}. Intervals: 95% bootstrap over domains.", "",
             "| train domains | right first tool % [95%] | 2-5 tools | 6-9 tools | 10+ tools | mean P(gold) among tools "
             "| mean rank of gold | scored in |", "|---|---|---|---|---|---|---|---|"]
    for m in out["models"]:
        s = m["summary"]
        rights = " | ".join(interval_text(iv) for iv in [s["right"], *(s["by_tools"][b] for b in BUCKETS)])
        lines.append(f"| {m['label']} | {rights} | {s['gold_prob']:.3f} | {s['gold_rank']:.2f} | {scored_in(m['seconds'])} |")
    lines += [f"| text match (no model) | {interval_text(ref['text_match'])} | | | | | | |",
              f"| chance (1 / tools) | {100 * ref['chance']:.1f} | | | | | | |", "",
              "Paired differences (right first tool, percentage points, the same scenarios resampled by domain):", ""]
    lines += [f"- {d['from']} -> {d['to']}: {interval_text(d['difference'])}" for d in out["differences"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--curve", default="c120", help="the suffix of the curve's folders: closed_loop/scaling-<n>-<curve>")
    ap.add_argument("--name", default="tool_choice")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"),
                    help="bfloat16: the dtype of the curve's training matmuls (autocast), ~2.5x faster here")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-domain", type=int, default=None,
                    help="at most this many scenarios per domain (the same ones for every model; the evaluation "
                         "set's scenarios always in); default all")
    ap.add_argument("--max-prompt-tokens", type=int, default=3072,
                    help="only domains whose system turn fits (the evaluation set's own limit: its servers' context)")
    args = ap.parse_args()
    ws = Workspace(args.workspace)
    scenarios = load_scenarios(ws)
    train_domains = {s.domain for s in scenarios if s.split == "train"}
    tok = load_tokenizer()
    fits = {d: prompt_tokens(ws, d, tok) <= args.max_prompt_tokens
            for d in {s.domain for s in scenarios if s.split != "train" and s.domain not in train_domains}}
    held = [s for s in scenarios if s.split != "train" and fits.get(s.domain)]
    evaluated = set(json.loads(eval_set_path(ws).read_text())["scenario_ids"]) if eval_set_path(ws).exists() else set()
    if args.per_domain is not None:
        by_domain: dict[str, list[Any]] = defaultdict(list)
        for s in sorted(held, key=lambda s: (s.id not in evaluated, content_hash({"pick": s.id}))):
            by_domain[s.domain].append(s)
        held = [s for d in sorted(by_domain)
                for s in by_domain[d][:max(args.per_domain, sum(x.id in evaluated for x in by_domain[d]))]]
    tools, systems = {}, {}
    for d in sorted({s.domain for s in held}):
        tools[d], systems[d] = domain_setup(DomainSpec.load(ws.domain_dir(d)))
    items, skipped = choice_items(held, tools)
    models = []
    for label, path in curve_models(ws, args.curve):
        rows, seconds = scored_rows(ws, label, path, items, tools, systems, args.dtype, args.threads)
        models.append({"label": label, "checkpoint": str(path), "seconds": round(seconds, 1), "summary": summary(rows),
                       "rows": rows})
    # neighbouring points, then the first trained point -> the last
    pairs = list(zip(models, models[1:])) + ([(models[1], models[-1])] if len(models) > 3 else [])
    out = {"name": args.name, "workspace": str(ws.root), "curve": args.curve, "dtype": args.dtype,
           "per_domain": args.per_domain, "max_prompt_tokens": args.max_prompt_tokens,
           "domains_over_prompt_limit": sum(not v for v in fits.values()), "items": len(items),
           "domains": len({i.domain for i in items}), "skipped": skipped, "models": models,
           "reference": {"text_match": domain_interval([(r["domain"], float(r["text_match"])) for r in models[0]["rows"]]),
                         "chance": round(sum(1 / len(i.tools) for i in items) / len(items), 4)},
           "differences": [{"from": a["label"], "to": b["label"], "difference": paired(a["rows"], b["rows"])}
                           for a, b in pairs],
           "commit": short_sha("HEAD"), "machine": machine()}
    md = markdown(out)
    md += f"\nWritten {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {out['commit']}.\n"
    for m in models:
        m.pop("rows")
    (RESULTS / f"{args.name}.md").write_text(md)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=1, default=str))
    print(md)


if __name__ == "__main__":
    main()
