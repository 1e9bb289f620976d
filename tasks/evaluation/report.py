"""Run report: markdown + HTML with matplotlib PNGs (Agg), written to `<ws>/reports/<run>/`.

Sections: the data funnel (tools -> domains -> environments -> scenarios -> trajectories ->
verified -> SFT rows, counted from the workspace; agent experience and gold replays in their own
columns, evaluation runs apart, and the runs each count comes from), domain sizes, environment
quality (id coherence, write observability, execution, chain share, non-empty gold reads:
tasks.environments.quality), and, when an evaluation of the run exists (`reports/eval-<run>.json`),
pass^k curves per domain, accuracy vs number of gold tool calls, failure attribution and reasons;
given several evaluations (the demo's base and trained models), a before/after section with the
scenarios they ran on. `report_markdown(...)` returns the markdown the
lead attaches to the Prefect run as an artifact.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

import markdown
import pyarrow.parquet as pq

from agentscaler.artifacts import (contamination_report, load_domains, load_scenarios, read_trajectories,
                                   trajectory_files)
from agentscaler.models import GOLD_REPLAY, Scenario, Trajectory
from agentscaler.plots import pyplot, save_png
from agentscaler.workspace import Workspace, atomic_write_text
from envs.spec import DomainSpec
from tasks.environments.quality import quality_summary
from tasks.evaluation.compare import interval_text as _interval
from tasks.evaluation.compare import markdown as compare_markdown
from tasks.evaluation.evaluate import ARGUMENT_ERRORS, eval_path
from tasks.rollouts.conversation import sampling_temperature


def _parquet_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


CHAIN = ("tools", "domains", "environments", "scenarios", "trajectories", "verified", "sft_rows")
RUN_KINDS = ("collection", "gold replay", "evaluation")


def run_kind(ws: Workspace, run_id: str, trajectories: list[Trajectory]) -> str:
    """What a rollout run was for: an evaluation (it has reports/eval-<run>.json), a gold replay
    (every trajectory replays gold calls), or the collection of agent experience."""
    if eval_path(ws, run_id).exists():
        return "evaluation"
    if trajectories and all(t.origin == GOLD_REPLAY for t in trajectories):
        return "gold replay"
    return "collection"


def funnel_runs(ws: Workspace, run_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per rollout run (default: every run of the workspace): its kind, its trajectories by
    origin, and how many passed verification."""
    rows = []
    for path in trajectory_files(ws, run_ids):
        trajs = [t for _, t, _, _ in read_trajectories(path) if t is not None]
        origins = Counter(t.origin for t in trajs)
        passed = Counter(t.origin for t in trajs if t.verdict and t.verdict.passed)
        rows.append({"run": path.parent.name, "kind": run_kind(ws, path.parent.name, trajs),
                     "trajectories": len(trajs), "agent": origins["agent"], "gold_replay": origins[GOLD_REPLAY],
                     "passed": sum(passed.values()), "passed_agent": passed["agent"],
                     "passed_gold_replay": passed[GOLD_REPLAY]})
    return rows


def _sft_origins(ws: Workspace) -> Counter:
    out: Counter = Counter()
    for p in sorted(ws.sft_dir.glob("stage*/*.parquet")):
        table = pq.read_table(p, columns=["origin"]) if "origin" in pq.ParquetFile(p).schema.names else None
        if table is None:
            out["unlabelled"] += _parquet_rows(p)  # exported before rows carried their origin
        else:
            out.update(table.column("origin").to_pylist())
    return out


def funnel(ws: Workspace, run_ids: list[str] | None = None) -> dict[str, int]:
    """tools -> domains (reads shared with the writes they observe) -> environments (their tools,
    near-duplicate tools merged as aliases) ->
    scenarios -> trajectories -> verified -> SFT rows, counted on disk (a missing stage counts 0), with every count that mixes origins split into agent experience
    and gold replays (`*_agent`, `*_gold_replay`).

    Trajectories and verified count the training runs among `run_ids` (default: every run of the
    workspace): agent collection and gold replays. Evaluation runs are counted apart
    (`evaluation_trajectories`, `evaluation_passed`), never in the chain; `funnel_runs` says which run
    each count comes from."""
    runs = funnel_runs(ws, run_ids)
    train = [r for r in runs if r["kind"] != "evaluation"]
    evals = [r for r in runs if r["kind"] == "evaluation"]
    sft = _sft_origins(ws)
    specs = []
    for d in ws.domain_ids():
        try:
            specs.append(DomainSpec.load(ws.domain_dir(d)))
        except (OSError, ValueError):  # an unreadable spec is not an environment's tools
            continue
    merged = sum(((s.report or {}).get("near_duplicates") or {}).get("merged", 0) for s in specs)
    records = load_domains(ws)
    out = {"tools": _parquet_rows(ws.tools_path) if ws.tools_path.exists() else 0, "domains": len(records),
           # discovery's reads shared with the writes they observe, and writes no corpus read is about
           "reads_shared": sum(len(r.get("shared") or []) for r in records),
           "writes_unobservable_in_corpus": sum(len(r.get("unobservable") or []) for r in records),
           "environments": len(ws.domain_ids()), "environment_tools": sum(len(s.tools) for s in specs),
           # reads rule synthesis added (not from the corpus) so a written record can be looked at
           "synthesized_observers": sum(t.origin == "synthesized" for s in specs for t in s.tools),
           "near_duplicates_merged": merged, "scenarios": len(load_scenarios(ws)),
           "trajectories": sum(r["trajectories"] for r in train), "verified": sum(r["passed"] for r in train),
           "sft_rows": sum(sft.values())}
    for origin, suffix in (("agent", "agent"), (GOLD_REPLAY, "gold_replay")):
        out[f"trajectories_{suffix}"] = sum(r[suffix] for r in train)
        out[f"verified_{suffix}"] = sum(r[f"passed_{suffix}"] for r in train)
        out[f"sft_rows_{suffix}"] = sft[origin]
    if sft.get("unlabelled"):
        out["sft_rows_unlabelled"] = sft["unlabelled"]
    out["evaluation_trajectories"] = sum(r["trajectories"] for r in evals)
    out["evaluation_passed"] = sum(r["passed"] for r in evals)
    return out


def funnel_markdown(counts: dict[str, int], runs: list[dict[str, Any]] | None = None) -> str:
    """The funnel as markdown: the chain with agent and gold-replay columns, evaluations apart, and
    (given `runs`) the runs each count comes from."""
    rows = []
    for key in CHAIN:
        split = f"{key}_agent" in counts
        rows.append([key, counts.get(key, 0), counts.get(f"{key}_agent", "") if split else "",
                     counts.get(f"{key}_gold_replay", "") if split else ""])
    out = [markdown_table(["stage", "total", "agent", "gold replay"], rows)]
    if counts.get("reads_shared") or counts.get("writes_unobservable_in_corpus"):
        out += ["", f"Discovery shared {counts.get('reads_shared', 0)} reads with the domains whose writes they "
                    f"show; {counts.get('writes_unobservable_in_corpus', 0)} writes change what no read of the "
                    f"corpus is about; synthesis added {counts.get('synthesized_observers', 0)} observer reads "
                    f"(not from the corpus) for written records no read of their domain is about."]
    if "evaluation_trajectories" in counts:
        out += ["", f"Evaluation runs (not training data, not in the chain above): "
                    f"{counts['evaluation_trajectories']} trajectories, {counts['evaluation_passed']} passed."]
    if runs:
        out += ["", markdown_table(["run", "kind", "trajectories", "agent", "gold replay", "passed"],
                           [[f"`{r['run']}`", r["kind"], r["trajectories"], r["agent"], r["gold_replay"], r["passed"]]
                            for r in sorted(runs, key=lambda r: (RUN_KINDS.index(r["kind"]), r["run"]))])]
    return "\n".join(out)


def domain_sizes(ws: Workspace) -> list[int]:
    """Tools per discovered domain (graph/domains.json), or per environment when no graph exists."""
    if ws.domains_path.exists():
        return [len(d.get("tools") or d.get("names") or []) for d in load_domains(ws)]
    return [len(DomainSpec.load(ws.domain_dir(d)).tools) for d in ws.domain_ids()]


def load_eval(ws: Workspace, run_id: str | None) -> dict[str, Any] | None:
    if run_id is None:
        return None
    path = eval_path(ws, run_id)
    return json.loads(path.read_text("utf-8")) if path.exists() else None


# ------------------------------------------------------------------------------------ plots
def plot_passk(ev: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    block = ev["pass^k"]
    for name, b in [("overall", block["overall"])] + sorted(block["domains"].items()):
        ks = sorted(int(k) for k in b["pass^k"])
        if ks:
            ax.plot(ks, [b["pass^k"][str(k)] for k in ks], marker="o", label=name[:24],
                    linewidth=2.5 if name == "overall" else 1.2)
    ax.set(xlabel="k", ylabel="pass^k", ylim=(0, 1.02), title="pass^k (agent-attributed trials)")
    ax.legend(fontsize=7)
    return save_png(fig, path)


def plot_by_calls(ev: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    by = ev["pass^k"]["by_gold_calls"]
    ns = sorted(by, key=int)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([str(n) for n in ns], [by[n]["accuracy"] for n in ns], color="tab:blue")
    for i, n in enumerate(ns):
        ax.text(i, by[n]["accuracy"] + 0.01, f"n={by[n]['trials']}", ha="center", fontsize=7)
    ax.set(xlabel="gold tool calls in the scenario", ylabel="accuracy (per trial)", ylim=(0, 1.05),
           title="accuracy vs number of tool calls")
    return save_png(fig, path)


def plot_funnel(counts: dict[str, int], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    names = [n for n in CHAIN if n in counts]
    ax.barh(names[::-1], [counts[n] for n in names][::-1], color="tab:green")
    for i, n in enumerate(names[::-1]):
        ax.text(counts[n], i, f" {counts[n]}", va="center", fontsize=8)
    ax.set(xscale="symlog", xlabel="count (symlog)", title="data funnel")
    return save_png(fig, path)


def plot_training_curve(curve: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """Train loss (per logged step) and validation loss (scenarios never trained on) against steps."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    train, val = curve.get("train") or [], curve.get("validation") or []
    ax.plot([p["step"] for p in train], [p["loss"] for p in train], color="tab:blue", alpha=0.5, linewidth=1,
            label="train loss")
    if val:
        ax.plot([p["step"] for p in val], [p["loss"] for p in val], color="tab:red", marker="o",
                label="validation loss (held-out rows)")
    ax.set(xlabel="optimizer step", ylabel="loss (assistant tokens)", title="SFT loss")
    ax.legend(fontsize=8)
    return save_png(fig, path)


def plot_scaling(points: list[dict[str, Any]], path: Path) -> Path:
    """Held-out pass^1 with its 95% interval against the number of training domains (0 = base)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [max(p["domains"], 1) for p in points]
    for key, color, label in (("pass^1", "tab:blue", "all scenarios"), ("single_call", "tab:green", "single-call"),
                              ("multi_call", "tab:orange", "multi-call")):
        ivs = [p.get(key) or {} for p in points]
        ok = [(x, iv) for x, iv in zip(xs, ivs) if iv.get("estimate") is not None]
        if not ok:
            continue
        ys = [iv["estimate"] for _, iv in ok]
        err = [[y - iv["low"] for y, (_, iv) in zip(ys, ok)], [iv["high"] - y for y, (_, iv) in zip(ys, ok)]]
        ax.errorbar([x for x, _ in ok], ys, yerr=err, marker="o", capsize=3, color=color, label=label,
                    linewidth=2 if key == "pass^1" else 1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [p["label"] for p in points], fontsize=7)
    ax.set(xlabel="training domains (log scale; 0 = base model)", ylabel="held-out pass^1", ylim=(0, 1),
           title="environment-scaling curve")
    ax.legend(fontsize=8)
    return save_png(fig, path)


def plot_domain_sizes(sizes: list[int], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(sizes or [0], bins=min(30, max(1, len(set(sizes)))), color="tab:orange")
    ax.set(xlabel="tools per domain", ylabel="domains", title=f"domain sizes ({len(sizes)} domains)")
    return save_png(fig, path)


# ---------------------------------------------------------------------------------- markdown
def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table (the report's, the dataset card's)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}%"


def quality_markdown(q: dict[str, Any], worst: int = 10) -> list[str]:
    """The environment quality section (tasks.environments.quality.quality_summary)."""
    p = q["pooled"]
    out = ["", "## Environment quality", "",
           f"{p['domains']} synthesized domains, {p['tools']} tools ({p['merged']} near-duplicate tools merged as "
           f"aliases); scenario kinds {p['kinds']}; tools given a documented default (bad input), by reason: "
           f"{p.get('bad_input') or 'none'}.", "",
           markdown_table(["metric", "value", "aim"],
                  [["id coherence (id parameters that resolve to a seed row or a created id)", _pct(p["id_coherence"]),
                    ">= 95%"],
                   ["write observability, corpus reads only (writes whose effect some corpus read shows)",
                    _pct(p["write_observability"]), ">= 95%"],
                   [f"write observability, with the {p.get('observers', 0)} synthesized observers (reads not from "
                    "the corpus: a get for each written record no read is about)",
                    _pct(p.get("write_observability_with_observers")), ">= 95%"],
                   ["execution (tools whose grounded call returns a non-error, non-empty result)",
                    _pct(p["execute_rate"]), "-"],
                   ["chain share (multi-call scenarios where a later call uses what an earlier one returned)",
                    _pct(p["chain_share"]), ">= 40%"],
                   ["gold read calls with a non-empty result", _pct(p["nonempty_read_share"]), ">= 90%"]])]
    for key, label in (("id_coherence", "id coherence"), ("write_observability", "write observability"),
                       ("nonempty_read_share", "non-empty gold reads")):
        rows = sorted([d for d in q["domains"] if d["synthesizer"] != "tau2" and d.get(key) is not None
                       and d[key] < 0.9999], key=lambda d: (d[key], d["domain"]))[:worst]
        if rows:
            out += ["", f"Worst domains by {label}:", "",
                    markdown_table(["domain", "name", label], [[d["domain"], d["name"], _pct(d[key])] for d in rows])]
    return out


def _eval_section(ev: dict[str, Any], images: dict[str, str], title: str, h: str = "##", suffix: str = "") -> list[str]:
    """One evaluation: pass^k per domain, accuracy by gold calls, failures (image keys end in `suffix`)."""
    block = ev["pass^k"]
    ks = sorted({int(k) for b in [block["overall"], *block["domains"].values()] for k in b["pass^k"]})
    rows = [[name, b["scenarios"], b["trials"], *[_pct(b["pass^k"].get(str(k))) for k in ks]]
            for name, b in [("**overall**", block["overall"]), *sorted(block["domains"].items())]]
    out = ["", f"{h} {title}", "",
           f"model `{ev.get('model', '?')}`, suite {ev.get('suite', '?')}, split {ev.get('split', '?')}, "
           f"k = {ev.get('k')}; {ev.get('trajectories')} trajectories, accuracy {_pct(ev.get('accuracy'))}; "
           f"{block.get('excluded', 0)} trials failed by the user simulator or the environment left out of pass^k.",
           "", markdown_table(["domain", "scenarios", "trials", *[f"pass^{k}" for k in ks]], rows)]
    if "passk" + suffix in images:
        out += ["", f"![pass^k]({images['passk' + suffix]})"]
    by = block["by_gold_calls"]
    out += ["", f"{h}# Accuracy by number of gold tool calls", "",
            markdown_table(["gold calls", "trials", "accuracy"], [[n, by[n]["trials"], _pct(by[n]["accuracy"])]
                                                          for n in sorted(by, key=int)])]
    if "by_calls" + suffix in images:
        out += ["", f"![accuracy vs calls]({images['by_calls' + suffix]})"]
    out += ["", f"{h}# Failures", "", markdown_table(["attribution", "trials"], sorted((ev.get("attribution") or {}).items())),
            "", markdown_table(["reason", "trials"], sorted((ev.get("reasons") or {}).items(), key=lambda kv: -kv[1]))]
    agr = ev.get("tau2_agreement")
    if agr:
        out += ["", f"tau2's own evaluator agrees with our DB verdict on {agr['agree']} of {agr['cases']} "
                    f"action sequences ({_pct(agr['agreement_rate'])})."]
    return out


def _comparison_section(evals: list[tuple[str, dict[str, Any]]], scenarios: list[Scenario],
                        images: dict[str, str], comparison: dict[str, Any] | None = None) -> list[str]:
    """Before/after: the same table for each evaluation, their paired comparison with intervals (when the
    workspace holds one for these two runs), the scenarios they ran on, then each in detail."""
    ks = sorted({int(k) for _, ev in evals for k in ev["pass^k"]["overall"]["pass^k"]})
    rows = [[label, f"`{ev.get('model', '?')}`", ev.get("scenarios"), ev.get("trajectories"), _pct(ev.get("accuracy")),
             *[_pct(ev["pass^k"]["overall"]["pass^k"].get(str(k))) for k in ks], ev.get("wall_s", "-")]
            for label, ev in evals]
    sets = [frozenset(ev.get("scenario_ids") or []) for _, ev in evals]
    same = len(set(sets)) == 1 and bool(sets[0])
    out = ["", "## Evaluation: before and after", "",
           "Each model on the same held-out scenarios, k trials each; the simulated user never sees the gold "
           "state (no goal check in evaluation).", "",
           markdown_table(["model", "name", "scenarios", "trials", "accuracy", *[f"pass^{k}" for k in ks], "wall s"], rows),
           "", ("Both evaluations ran on the same scenarios." if same else
                "The evaluations did not run on the same scenarios: compare with care.")]
    if comparison:
        out += ["", "### Paired comparison with 95% intervals", "", compare_markdown(comparison, "base", "trained")]
    out += ["", "### Scenarios used", "",
           markdown_table(["scenario", "domain", "read-only", "gold calls", "intent"],
                  [[f"`{s.id}`", s.domain, s.read_only, len(s.gold_calls), s.intent[:100].replace("|", "/")]
                   for s in scenarios])]
    for i, (label, ev) in enumerate(evals):
        out += _eval_section(ev, images, f"{label}: `{ev.get('model', '?')}`", h="###", suffix=f"_{i}")
    return out


def report_markdown(run_id: str | None, counts: dict[str, int], sizes: list[int], ev: dict[str, Any] | None = None,
                    images: dict[str, str] | None = None, bfcl: list[dict[str, Any]] | None = None,
                    contamination: dict[str, Any] | None = None, quality: dict[str, Any] | None = None,
                    runs: list[dict[str, Any]] | None = None,
                    evaluations: list[tuple[str, dict[str, Any]]] | None = None,
                    scenarios: list[Scenario] | None = None, comparison: dict[str, Any] | None = None) -> str:
    """The run report as markdown (image links relative to the report folder). `evaluations`
    (label, evaluation report) pairs and the `scenarios` they ran on make the before/after section."""
    images = images or {}
    out = [f"# AgentScaler report: {run_id or 'workspace'}", "", "## Funnel", "", funnel_markdown(counts, runs)]
    if "funnel" in images:
        out += ["", f"![funnel]({images['funnel']})"]
    out += ["", "## Domains", "", f"{len(sizes)} domains; tools per domain: "
            + (f"min {min(sizes)}, median {sorted(sizes)[len(sizes) // 2]}, max {max(sizes)}" if sizes else "none")]
    if "domain_sizes" in images:
        out += ["", f"![domain sizes]({images['domain_sizes']})"]
    if quality and quality["domains"]:
        out += quality_markdown(quality)
    if evaluations:
        out += _comparison_section(evaluations, scenarios or [], images, comparison)
    if ev:
        out += _eval_section(ev, images, "Evaluation")
    if bfcl:
        out += ["", "## BFCL (AST matcher)", "",
                markdown_table(["category", "model", "tool choice", "items", "accuracy"],
                       [[b.get("category"), b.get("model"), b.get("tool_choice", "auto"), b.get("items"),
                         _pct(b.get("accuracy"))] for b in bfcl])]
    if contamination:
        p = contamination.get("params", {})
        out += ["", "## Contamination", "",
                f"{contamination.get('flagged', 0)} of {contamination.get('scenarios', 0)} scenarios flagged "
                f"({contamination.get('flagged_train', 0)} in train, kept out of SFT export); intent cosine >= "
                f"{p.get('intent_threshold')}, call Jaccard >= {p.get('calls_threshold')}; by kind: "
                f"{contamination.get('by_kind', {})}."]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------- closed loop and scaling curve
def tau2_settings_line(out: dict[str, Any]) -> str:
    """How a closed loop's tau2 comparison was run, and whether the trained model had seen tau2."""
    st, cfg = out.get("tau2_settings") or {}, out["config"]
    tasks = "every test task" if st.get("tau2_max_scenarios") is None else f"the first {st['tau2_max_scenarios']} test tasks"
    seen = {True: "saw tau2's train split in training", False: "never saw a tau2 domain in training",
            None: "trained with the loop's settings"}[st.get("trained_on_tau2")]
    agree = [(out[s].get("tau2") or {}).get("tau2_agreement") or {} for s in ("base", "trained")]
    line = (f"{', '.join(st.get('tau2_domains') or cfg.get('tau2_domains') or ['airline', 'retail'])}: {tasks}, "
            f"k = {st.get('tau2_k', cfg.get('tau2_k'))}, servers with {st.get('tau2_n_ctx', cfg.get('n_ctx'))} positions; "
            f"the trained model {seen}.")
    if all(a.get("cases") for a in agree):
        line += (f" tau2's own evaluator agrees with our DB verdict on {sum(a['agree'] for a in agree)} of "
                 f"{sum(a['cases'] for a in agree)} sampled action sequences.")
    return line


def _planned(cfg: dict[str, Any]) -> str:
    """The main run's planned length: a step count, or a wall-clock budget."""
    return f"{cfg['main_steps']} steps planned" if cfg.get("main_steps") else f"{cfg['budget_minutes']} min budget"


def penalty_text(cfg: dict[str, Any]) -> str:
    """The agent's repetition penalty as a report says it (a config written before the setting, or
    None: the server's default, llama-cpp-python's 1.1)."""
    value = cfg.get("repeat_penalty")
    return ("the server's default repetition penalty (llama-cpp-python: 1.1)" if value is None
            else f"repetition penalty {value:g}" + (" (none)" if value == 1.0 else ""))


def closed_loop_markdown(out: dict[str, Any]) -> str:
    """reports/closed_loop.md from reports/closed_loop.json (flows/closed_loop.py)."""
    cfg, ev, tr = out["config"], out["eval_set"], out["train"]
    lines = [
        "# Closed loop on CPU: SmolLM2-135M before and after SFT", "",
        (f"Evaluation set: {ev['scenarios']} held-out scenarios from {len(ev['domains'])} held-out domains "
         f"({ev['single_call']} single-call, {ev['multi_call']} multi-call; prompts <= "
         f"{ev['criteria']['max_prompt_tokens']} tokens), k = {cfg['k']} trials each at temperature "
         f"{sampling_temperature(cfg['k'])} and {penalty_text(cfg)}, scripted user, the same scenarios for both models, "
         "both served by the same runtime with the same decoding."), "",
        compare_markdown(out["comparison"], "base", "trained"),
    ]
    if out.get("tau2_comparison"):
        lines += ["## tau2-bench test splits (airline + retail, scored as tau2 scores them)", "", tau2_settings_line(out),
                  "", compare_markdown(out["tau2_comparison"], "base", "trained")]
    ex = out["export"]
    lines += [
        "## Training", "",
        (f"Data: {ex['rows']['train']} training sessions ({ex['conversations_by_origin']['train']} conversations by "
         f"origin; gold-replay = demonstrations replayed from the scenarios' gold calls, any other origin = that "
         f"model's verified experience), {ex['rows']['eval']} validation sessions from scenarios never trained on, "
         f"sessions of <= {ex['session_length']} tokens."),
        (f"Run: {tr['global_step']} optimizer steps (batch {cfg['batch_size']} x {cfg['grad_accum']} accumulation), "
         f"stopped by {tr['stopped_by']} ({_planned(cfg)}), {_t(tr['train_seconds'])} s, "
         f"{_t(tr['tokens_per_second'])} tokens/s, learning rate {cfg['learning_rate']} ({cfg['lr_scheduler_type']} on "
         f"{'steps' if cfg.get('main_steps') else 'the clock'}), bf16 {cfg['bf16']}."), "",
        "| step | elapsed (s) | train loss | validation loss |", "|---|---|---|---|",
    ]
    val = {p["step"]: p["loss"] for p in tr["curve"]["validation"]}
    for p in _thin(tr["curve"]["train"], 12):
        lines.append(f"| {p['step']} | {_t(p['elapsed_s'])} | {p['loss']:.3f} | "
                     f"{val[p['step']]:.3f} |" if p["step"] in val else
                     f"| {p['step']} | {_t(p['elapsed_s'])} | {p['loss']:.3f} | |")
    for s, v in val.items():
        if s not in {p["step"] for p in _thin(tr["curve"]["train"], 12)}:
            lines.append(f"| {s} | | | {v:.3f} |")
    lines += ["", f"![training curve]({Path(out['figures']['training_curve']).name})", "",
              "## Cost", "", *cost_table(out)]
    lines += ["", "| phase | seconds |", "|---|---|", *[f"| {p} | {s} |" for p, s in out["phases_s"].items()], ""]
    return "\n".join(lines)


def cost_table(out: dict[str, Any]) -> list[str]:
    """Each model's evaluations in a closed loop's output: conversations, agent requests and their cost."""
    lines = ["| model | suite | conversations | agent requests | s per agent request | format errors | tool calls run "
             "| eval wall (s) |", "|---|---|---|---|---|---|---|---|"]
    for side in ("base", "trained"):
        for suite, rep in out[side].items():
            c = rep["cost"]
            lines.append(f"| {rep['model']} | {suite} | {c['conversations']} | {c['agent_requests']} | "
                         f"{c['seconds_per_request']} | {c['format_errors']} | {c['tool_calls_executed']} | "
                         f"{rep.get('wall_s')} |")
    return lines


def _t(v: Any, digits: int = 1) -> str:
    return "n/a" if v is None else f"{float(v):.{digits}f}"


def _thin(points: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """At most n points, evenly spaced, the last one kept."""
    if len(points) <= n:
        return points
    step = len(points) / n
    picked = [points[int(i * step)] for i in range(n)]
    return picked[:-1] + [points[-1]]


def scaling_markdown(out: dict[str, Any]) -> str:
    """reports/scaling.md from reports/scaling.json (flows/closed_loop.scaling_curve)."""
    cfg = out["config"]
    lines = ["# Environment-scaling curve (SmolLM2-135M, CPU)", "",
             (f"Held-out pass^1 (k = {cfg['scaling_k']}, in percent, 95% bootstrap interval over scenarios; the agent "
              f"at {penalty_text(cfg)}) on the same evaluation set, after SFT on the first N train domains (a fixed "
              f"hash order: each set contains the smaller ones), {out['steps']} optimizer steps each (batch {cfg['batch_size']} x {cfg['grad_accum']}), "
              f"the same learning rate, "
              f"{'sessions of up to ' + str(cfg['session_length']) + ' tokens' if cfg.get('session_length') else 'rows (one conversation each)'}"
              f" and data recipe (gold replays of the domains' train scenarios"
              f"{' + experience ' + str(cfg['experience_runs']) if cfg['experience_runs'] else ''})"
              + (f"; equal data: each point's train split cut to {cfg['scaling_conversations']} conversations drawn "
                 "evenly over its domains, so points differ in domains, not in how much data they train on."
                 if cfg.get("scaling_conversations") else
                 "; each point trains on all of its domains' rows (more domains, more data).")), "",
             "| train domains | conversations (train) | pass^1 | single-call | multi-call | right first tool "
             "| right first call | train loss (last) | epochs |",
             "|---|---|---|---|---|---|---|---|---|"]
    sessions = False
    for p in out["points"]:
        export = p.get("export") or {}
        conv, capped = export.get("conversations_by_origin") or {}, export.get("capped") or {}
        sessions = sessions or bool(export.get("session_length"))
        d, train = p.get("diagnostics") or {}, p.get("train") or {}
        n = sum((conv.get("train") or {}).values()) if conv else 0
        spans = f" from {capped['domains_after']} domains" if "domains_after" in capped else ""  # the equal draw's
        lines.append(f"| {p['label']} | {n}{spans} | {_interval(p['pass^1'])} "
                     f"| {_interval(p['single_call'])} | {_interval(p['multi_call'])} | {d.get('right_first_tool')} "
                     f"| {d.get('right_first_call')} | {_t(train.get('last_loss'), 3)} | {_t(train.get('epochs'), 2)} |")
    if sessions and cfg.get("scaling_conversations"):
        lines += ["", "Each row joins conversations of one domain into a session (up to the session length in tokens, the "
                  "domain's prompt once): a point of few domains packs more of its conversations into a row, so with "
                  "the same steps it sees each of them more often (the epochs column), even on equal data."]
    measured = {p["label"].split(" ")[0] for p in out["points"]}
    missing = [label for label in cfg.get("scaling_points", []) if label not in measured]
    if missing:
        lines += ["", f"Not measured: {', '.join(missing)} train domains (a run in progress or stopped before them, "
                  "or more domains than the workspace trains on)."]
    for p in out["points"]:
        if p.get("checkpoint", "own") != "own":  # named by its model: a later main run may be another one
            lines += ["", f"Point {p['label']}: the checkpoint of the main run of that time ({p.get('model')}), trained "
                      "on the same rows for the same number of steps" + ("; its warmup and cosine learning rate ran "
                      "on the clock instead of on steps." if "clock" in p["checkpoint"] else ".")]
    lines += scaling_differences(out.get("differences"))
    lines += scaling_reasons(out["points"], bool(cfg.get("stop_when_failed")))
    lines += scaling_arguments(out["points"])
    lines += ["", f"![scaling curve]({Path(out['figure']).name})", ""]
    return "\n".join(lines)


def scaling_differences(diff: dict[str, Any] | None) -> list[str]:
    """The curve's paired differences (tasks.evaluation.compare.curve_differences) and its verdict:
    whether more domains beat fewer beyond the noise of this many scenarios."""
    if not diff:
        return []
    rows = [[f"{d['from']} -> {d['to']}", _interval(d), "yes" if d["excludes_zero"] else "no"]
            for d in [*diff["steps"], *([diff["span"]] if len(diff["steps"]) > 1 else [])]]
    return ["", "Paired differences in pass^1 (points, the same scenarios resampled together; the last row, when "
            "there are more than two trained points, is the widest point against the narrowest):", "",
            markdown_table(["train domains", "difference", "interval excludes 0"], rows), "",
            f"Verdict: the curve {VERDICT_WORDS.get(diff['verdict'], diff['verdict'])} (rises: the widest point beats "
            "the narrowest with an interval above 0 and no step falls with one below 0)."]


# compare.curve_differences' verdict as a report's sentence says it
VERDICT_WORDS = {"rises": "**rises**", "falls": "**falls**", "flat": "is **flat** (no difference beyond the noise)",
                 "mixed": "is **mixed** (a step falls beyond the noise, the ends do not differ)"}


def scaling_reasons(points: list[dict[str, Any]], stopped: bool = False) -> list[str]:
    """Failed trials by reason at each curve point: where a point's pass^1 goes (e.g. a model that
    calls the right tool but never stops fails on repetition and the turn limit, not on the call).
    `stopped`: trials ended once their failure was settled, so later reasons (the turn limit) were
    never reached: said under the table, as such counts do not compare with a curve run to the end."""
    reasons: Counter[str] = Counter()
    for p in points:
        reasons.update(p.get("reasons") or {})
    if not reasons:
        return []
    cols = [r for r, _ in reasons.most_common()]
    rows = [[p["label"], *[(p.get("reasons") or {}).get(r, 0) if p.get("reasons") is not None else "n/a" for r in cols]]
            for p in points]
    lines = ["", "Failed trials by reason (a trial can fail for several reasons, so a row can sum to more than its "
             "failed trials):", "", markdown_table(["train domains", *cols], rows)]
    if stopped:
        lines += ["", "Trials ended once their failure was settled (`--stop-when-failed`): a stopped trial counts the "
                  "reasons up to that point, never a later turn limit, so these counts do not compare with those of a "
                  "curve whose trials ran to their end."]
    return lines


def scaling_arguments(points: list[dict[str, Any]]) -> list[str]:
    """At each curve point, the first calls that named the first gold tool with other arguments, by
    what was wrong (tasks.evaluation.evaluate.argument_errors): whether a point loses pass^1 in
    choosing the tool or in filling its arguments, and how."""
    counts = [((p.get("diagnostics") or {}).get("first_call_arguments")) for p in points]
    if not any(counts):
        return []
    rows = []
    for p, c in zip(points, counts):
        d = p.get("diagnostics") or {}
        tool, call = d.get("right_first_tool"), d.get("right_first_call")
        other = "n/a" if tool is None or call is None else tool - call
        text = d.get("text_match_first_tool")
        rows.append([p["label"], *["n/a" if v is None else v for v in (text, tool, call)], other,
                     *[("n/a" if c is None else c.get(kind, "n/a")) for kind in (*ARGUMENT_ERRORS, "values_stated")]])
    return ["", "First calls that named the first gold tool, and of those with other arguments than gold's, what was "
            "wrong (a call can be wrong in several ways; empty value: an empty string where gold has a value; values "
            "stated: calls whose every wrong value the user had said before the call, so the agent had it and "
            "copying it failed). Text match: the trials whose first gold tool a bag-of-words picker names from the "
            "user's first message and the tools' names and descriptions, with no model "
            "(tasks.evaluation.evaluate.text_match_tool), a reference for how plain the words make the choice:", "",
            markdown_table(["train domains", "text match: right first tool", "right first tool", "right first call",
                            "other arguments", *[k.replace("_", " ") for k in (*ARGUMENT_ERRORS, "values_stated")]], rows)]


def markdown_to_html(md: str, title: str) -> str:
    body = markdown.markdown(md, extensions=["tables"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px}img{max-width:100%}</style></head>"
            f"<body>{body}</body></html>\n")


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text("utf-8")) if path.exists() else None


def comparison_path(ws: Workspace, name: str) -> Path:
    """reports/comparison-<name>.json: a base-vs-trained comparison (tasks.evaluation.compare), e.g. the demo's."""
    return ws.reports_dir / f"comparison-{name}.json"


def demo_path(ws: Workspace) -> Path:
    """reports/demo.json: the last demo's result (funnel, closed loop, wall time per stage and in all; flows/demo.py
    writes it), what benchmarks/bench_demo.py turns into the README's demo figures."""
    return ws.reports_dir / "demo.json"


def _comparisons(ws: Workspace) -> list[tuple[str, dict[str, Any]]]:
    return [(p.stem.removeprefix("comparison-"), json.loads(p.read_text("utf-8")))
            for p in sorted(ws.reports_dir.glob("comparison-*.json"))]


def loop_sections(ws: Workspace, out_dir: Path, images: dict[str, str], shown: dict[str, Any] | None = None) -> str:
    """The report's closing sections, from what the workspace holds: base-vs-trained comparisons
    (the pipeline's and the demo's; `shown`, already in the before/after section, is not repeated),
    the closed loop (reports/closed_loop.json) with its training curve, and the environment-scaling
    curve (reports/scaling.json); their PNGs go to `out_dir`."""
    out: list[str] = []
    for name, cmp in _comparisons(ws):
        if cmp == shown:
            continue
        out += [f"## Base vs trained: {name}", "",
                f"`{cmp.get('base_model')}` vs `{cmp.get('trained_model')}` on the same "
                f"{cmp['groups']['overall']['scenarios']} held-out scenarios, k = {cmp['k']}.", "",
                compare_markdown(cmp, "base", "trained")]
    loop = _read(ws.reports_dir / "closed_loop.json")
    if loop:
        images["closed_loop_training"] = plot_training_curve(loop["train"]["curve"],
                                                             out_dir / "closed_loop_training.png").name
        out += [closed_loop_markdown(loop).replace("# Closed loop", "## Closed loop", 1)]
    scaling = _read(ws.reports_dir / "scaling.json")
    if scaling and scaling.get("figure"):
        images["scaling"] = plot_scaling(scaling["points"], out_dir / "scaling.png").name
        out += [scaling_markdown(scaling).replace("# Environment", "## Environment", 1)]
    return ("\n" + "\n".join(out)) if out else ""


def write_report(ws: Workspace, run_id: str | None = None,
                 evaluations: dict[str, str] | None = None) -> dict[str, Any]:
    """Write reports/<run>/report.md, report.html and the PNGs; returns their paths and the markdown.

    `evaluations`: {label: evaluation run id} (e.g. the demo's base and trained models) for the
    before/after section, with the scenarios they ran on."""
    name = run_id or "workspace"
    out_dir = ws.reports_dir / name
    counts = funnel(ws, [run_id] if run_id else None)
    runs = funnel_runs(ws, [run_id] if run_id else None)
    sizes = domain_sizes(ws)
    ev = load_eval(ws, run_id)
    images = {"funnel": plot_funnel(counts, out_dir / "funnel.png").name,
              "domain_sizes": plot_domain_sizes(sizes, out_dir / "domain_sizes.png").name}
    evals = [(label, e) for label, rid in (evaluations or {}).items() if (e := load_eval(ws, rid)) is not None]
    for suffix, e in [("", ev)] + [(f"_{i}", e) for i, (_, e) in enumerate(evals)]:
        if e and e["pass^k"]["overall"]["pass^k"]:
            images["passk" + suffix] = plot_passk(e, out_dir / f"passk{suffix}.png").name
            images["by_calls" + suffix] = plot_by_calls(e, out_dir / f"accuracy_by_calls{suffix}.png").name
    used = sorted({sid for _, e in evals for sid in e.get("scenario_ids") or []})
    scenarios = [s for s in load_scenarios(ws) if s.id in set(used)] if used else []
    bfcl = [json.loads(p.read_text("utf-8")) for p in sorted(ws.reports_dir.glob("bfcl-*.json"))]
    cont = contamination_report(ws)
    shown_runs = {e.get("run_id") for _, e in evals}
    shown = next((c for _, c in _comparisons(ws) if {c.get("base_run"), c.get("trained_run")} <= shown_runs), None)
    md = report_markdown(run_id, counts, sizes, ev, images, bfcl, cont, quality=quality_summary(ws), runs=runs,
                         evaluations=evals, scenarios=scenarios, comparison=shown)
    md += loop_sections(ws, out_dir, images, shown)
    atomic_write_text(out_dir / "report.md", md)
    atomic_write_text(out_dir / "report.html", markdown_to_html(md, f"AgentScaler report {name}"))
    return {"dir": str(out_dir), "markdown": str(out_dir / "report.md"), "html": str(out_dir / "report.html"),
            "images": {k: str(out_dir / v) for k, v in images.items()}, "funnel": counts, "runs": runs,
            "has_eval": ev is not None or bool(evals), "evaluations": {label: e["run_id"] for label, e in evals}}
