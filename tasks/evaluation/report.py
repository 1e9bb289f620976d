"""Run report: markdown + HTML with matplotlib PNGs (Agg), written to `<ws>/reports/<run>/`.

Sections: the data funnel (tools -> domains -> environments -> scenarios -> trajectories ->
verified -> SFT rows, counted from the workspace; agent experience and gold replays in their own
columns, evaluation runs apart, and the runs each count comes from), domain sizes, and, when an
evaluation of the run exists (`reports/eval-<run>.json`), pass^k curves per domain, accuracy vs
number of gold tool calls, failure attribution and reasons; given several evaluations (the demo's
base and trained models), a before/after section with the scenarios they ran on. `report_markdown(...)` returns the markdown the
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

from agentscaler.artifacts import load_domains, load_scenarios, read_trajectories, trajectory_files
from agentscaler.models import GOLD_REPLAY, Scenario, Trajectory
from agentscaler.plots import pyplot, save_png
from agentscaler.workspace import Workspace, atomic_write_text
from envs.spec import DomainSpec
from tasks.evaluation.contamination import contamination_path
from tasks.evaluation.evaluate import eval_path


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
    """tools -> domains -> environments -> scenarios -> trajectories -> verified -> SFT rows, counted on
    disk (a missing stage counts 0), with every count that mixes origins split into agent experience
    and gold replays (`*_agent`, `*_gold_replay`).

    Trajectories and verified count the training runs among `run_ids` (default: every run of the
    workspace): agent collection and gold replays. Evaluation runs are counted apart
    (`evaluation_trajectories`, `evaluation_passed`), never in the chain; `funnel_runs` says which run
    each count comes from."""
    runs = funnel_runs(ws, run_ids)
    train = [r for r in runs if r["kind"] != "evaluation"]
    evals = [r for r in runs if r["kind"] == "evaluation"]
    sft = _sft_origins(ws)
    out = {"tools": _parquet_rows(ws.tools_path) if ws.tools_path.exists() else 0, "domains": len(load_domains(ws)),
           "environments": len(ws.domain_ids()), "scenarios": len(load_scenarios(ws)),
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
    out = [_table(["stage", "total", "agent", "gold replay"], rows)]
    if "evaluation_trajectories" in counts:
        out += ["", f"Evaluation runs (not training data, not in the chain above): "
                    f"{counts['evaluation_trajectories']} trajectories, {counts['evaluation_passed']} passed."]
    if runs:
        out += ["", _table(["run", "kind", "trajectories", "agent", "gold replay", "passed"],
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


def plot_domain_sizes(sizes: list[int], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(sizes or [0], bins=min(30, max(1, len(set(sizes)))), color="tab:orange")
    ax.set(xlabel="tools per domain", ylabel="domains", title=f"domain sizes ({len(sizes)} domains)")
    return save_png(fig, path)


# ---------------------------------------------------------------------------------- markdown
def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}%"


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
           "", _table(["domain", "scenarios", "trials", *[f"pass^{k}" for k in ks]], rows)]
    if "passk" + suffix in images:
        out += ["", f"![pass^k]({images['passk' + suffix]})"]
    by = block["by_gold_calls"]
    out += ["", f"{h}# Accuracy by number of gold tool calls", "",
            _table(["gold calls", "trials", "accuracy"], [[n, by[n]["trials"], _pct(by[n]["accuracy"])]
                                                          for n in sorted(by, key=int)])]
    if "by_calls" + suffix in images:
        out += ["", f"![accuracy vs calls]({images['by_calls' + suffix]})"]
    out += ["", f"{h}# Failures", "", _table(["attribution", "trials"], sorted((ev.get("attribution") or {}).items())),
            "", _table(["reason", "trials"], sorted((ev.get("reasons") or {}).items(), key=lambda kv: -kv[1]))]
    agr = ev.get("tau2_agreement")
    if agr:
        out += ["", f"tau2's own evaluator agrees with our DB verdict on {agr['agree']} of {agr['cases']} "
                    f"action sequences ({_pct(agr['agreement_rate'])})."]
    return out


def _comparison_section(evals: list[tuple[str, dict[str, Any]]], scenarios: list[Scenario],
                        images: dict[str, str]) -> list[str]:
    """Before/after: the same table for each evaluation, the scenarios they ran on, then each in detail."""
    ks = sorted({int(k) for _, ev in evals for k in ev["pass^k"]["overall"]["pass^k"]})
    rows = [[label, f"`{ev.get('model', '?')}`", ev.get("scenarios"), ev.get("trajectories"), _pct(ev.get("accuracy")),
             *[_pct(ev["pass^k"]["overall"]["pass^k"].get(str(k))) for k in ks], ev.get("wall_s", "-")]
            for label, ev in evals]
    sets = [frozenset(ev.get("scenario_ids") or []) for _, ev in evals]
    same = len(set(sets)) == 1 and bool(sets[0])
    out = ["", "## Evaluation: before and after", "",
           "Each model on the same held-out scenarios, k trials each; the simulated user never sees the gold "
           "state (no goal check in evaluation).", "",
           _table(["model", "name", "scenarios", "trials", "accuracy", *[f"pass^{k}" for k in ks], "wall s"], rows),
           "", ("Both evaluations ran on the same scenarios." if same else
                "The evaluations did not run on the same scenarios: compare with care."),
           "", "### Scenarios used", "",
           _table(["scenario", "domain", "read-only", "gold calls", "intent"],
                  [[f"`{s.id}`", s.domain, s.read_only, len(s.gold_calls), s.intent[:100].replace("|", "/")]
                   for s in scenarios])]
    for i, (label, ev) in enumerate(evals):
        out += _eval_section(ev, images, f"{label}: `{ev.get('model', '?')}`", h="###", suffix=f"_{i}")
    return out


def report_markdown(run_id: str | None, counts: dict[str, int], sizes: list[int], ev: dict[str, Any] | None = None,
                    images: dict[str, str] | None = None, bfcl: list[dict[str, Any]] | None = None,
                    contamination: dict[str, Any] | None = None, runs: list[dict[str, Any]] | None = None,
                    evaluations: list[tuple[str, dict[str, Any]]] | None = None,
                    scenarios: list[Scenario] | None = None) -> str:
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
    if evaluations:
        out += _comparison_section(evaluations, scenarios or [], images)
    if ev:
        out += _eval_section(ev, images, "Evaluation")
    if bfcl:
        out += ["", "## BFCL (AST matcher)", "",
                _table(["category", "model", "tool choice", "items", "accuracy"],
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


def markdown_to_html(md: str, title: str) -> str:
    body = markdown.markdown(md, extensions=["tables"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px}img{max-width:100%}</style></head>"
            f"<body>{body}</body></html>\n")


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
    cont_path = contamination_path(ws)
    cont = json.loads(cont_path.read_text("utf-8")) if cont_path.exists() else None
    md = report_markdown(run_id, counts, sizes, ev, images, bfcl, cont, runs, evals, scenarios)
    atomic_write_text(out_dir / "report.md", md)
    atomic_write_text(out_dir / "report.html", markdown_to_html(md, f"AgentScaler report {name}"))
    return {"dir": str(out_dir), "markdown": str(out_dir / "report.md"), "html": str(out_dir / "report.html"),
            "images": {k: str(out_dir / v) for k, v in images.items()}, "funnel": counts, "runs": runs,
            "has_eval": ev is not None or bool(evals), "evaluations": {label: e["run_id"] for label, e in evals}}
