"""Run report: markdown + HTML with matplotlib PNGs (Agg), written to `<ws>/reports/<run>/`.

Sections: the data funnel (tools -> domains -> environments -> scenarios -> trajectories ->
verified -> SFT rows, counted from the workspace), domain sizes, and, when an evaluation of the
run exists (`reports/eval-<run>.json`), pass^k curves per domain, accuracy vs number of gold
tool calls, failure attribution and reasons. `report_markdown(...)` returns the markdown the
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
from agentscaler.models import ORIGINS
from agentscaler.plots import pyplot, save_png
from agentscaler.workspace import Workspace, atomic_write_text
from envs.spec import DomainSpec
from tasks.evaluation.contamination import contamination_path
from tasks.evaluation.evaluate import eval_path


def _parquet_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def _sft_origins(path: Path) -> Counter:
    """SFT rows of a parquet split by origin (exports before origins were recorded count as 'unlabelled')."""
    if "origin" not in pq.read_schema(path).names:
        return Counter({"unlabelled": _parquet_rows(path)})
    return Counter(pq.read_table(path, columns=["origin"]).column("origin").to_pylist())


def funnel(ws: Workspace, run_ids: list[str] | None = None) -> dict[str, int]:
    """tools -> domains -> environments -> scenarios -> trajectories -> verified -> SFT rows, counted on
    disk (a missing stage counts 0). Trajectories and verified count the given rollout runs (default:
    every run of the workspace); the pipeline passes the runs it made. Trajectories, verified and SFT
    rows are also counted apart by origin: a model's own experience vs gold-replayed demonstrations."""
    tools = _parquet_rows(ws.tools_path) if ws.tools_path.exists() else 0
    trajs = [t for f in trajectory_files(ws, run_ids) for _, t, _, _ in read_trajectories(f) if t is not None]
    sft: Counter = Counter()
    for p in sorted(ws.sft_dir.glob("stage*/*.parquet")):
        sft += _sft_origins(p)
    out = {"tools": tools, "domains": len(load_domains(ws)), "environments": len(ws.domain_ids()),
           "scenarios": len(load_scenarios(ws)), "trajectories": len(trajs),
           "verified": sum(bool(t.verdict and t.verdict.passed) for t in trajs), "sft_rows": sum(sft.values())}
    for origin in ORIGINS:
        mine = [t for t in trajs if t.origin() == origin]
        out |= {f"trajectories_{origin}": len(mine), f"verified_{origin}": sum(bool(t.verdict and t.verdict.passed)
                                                                            for t in mine),
                f"sft_rows_{origin}": sft.get(origin, 0)}
    return out


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
    names = list(counts)
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


def report_markdown(run_id: str | None, counts: dict[str, int], sizes: list[int], ev: dict[str, Any] | None = None,
                    images: dict[str, str] | None = None, bfcl: list[dict[str, Any]] | None = None,
                    contamination: dict[str, Any] | None = None) -> str:
    """The run report as markdown (image links relative to the report folder)."""
    images = images or {}
    out = [f"# AgentScaler report: {run_id or 'workspace'}", "", "## Funnel", "",
           _table(["stage", "count"], [[k, v] for k, v in counts.items()])]
    if "funnel" in images:
        out += ["", f"![funnel]({images['funnel']})"]
    out += ["", "## Domains", "", f"{len(sizes)} domains; tools per domain: "
            + (f"min {min(sizes)}, median {sorted(sizes)[len(sizes) // 2]}, max {max(sizes)}" if sizes else "none")]
    if "domain_sizes" in images:
        out += ["", f"![domain sizes]({images['domain_sizes']})"]
    if ev:
        block = ev["pass^k"]
        ks = sorted({int(k) for b in [block["overall"], *block["domains"].values()] for k in b["pass^k"]})
        rows = [[name, b["scenarios"], b["trials"], *[_pct(b["pass^k"].get(str(k))) for k in ks]]
                for name, b in [("**overall**", block["overall"]), *sorted(block["domains"].items())]]
        out += ["", "## Evaluation", "",
                f"model `{ev.get('model', '?')}`, suite {ev.get('suite', '?')}, split {ev.get('split', '?')}, "
                f"k = {ev.get('k')}; {ev.get('trajectories')} trajectories, accuracy {_pct(ev.get('accuracy'))}; "
                f"{block.get('excluded', 0)} trials failed by the user simulator or the environment left out of pass^k.",
                "", _table(["domain", "scenarios", "trials", *[f"pass^{k}" for k in ks]], rows)]
        if "passk" in images:
            out += ["", f"![pass^k]({images['passk']})"]
        by = block["by_gold_calls"]
        out += ["", "### Accuracy by number of gold tool calls", "",
                _table(["gold calls", "trials", "accuracy"], [[n, by[n]["trials"], _pct(by[n]["accuracy"])]
                                                              for n in sorted(by, key=int)])]
        if "by_calls" in images:
            out += ["", f"![accuracy vs calls]({images['by_calls']})"]
        out += ["", "### Failures", "", _table(["attribution", "trials"], sorted((ev.get("attribution") or {}).items())),
                "", _table(["reason", "trials"], sorted((ev.get("reasons") or {}).items(), key=lambda kv: -kv[1]))]
        agr = ev.get("tau2_agreement")
        if agr:
            out += ["", f"tau2's own evaluator agrees with our DB verdict on {agr['agree']} of {agr['cases']} "
                        f"action sequences ({_pct(agr['agreement_rate'])})."]
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


def write_report(ws: Workspace, run_id: str | None = None) -> dict[str, Any]:
    """Write reports/<run>/report.md, report.html and the PNGs; returns their paths and the markdown."""
    name = run_id or "workspace"
    out_dir = ws.reports_dir / name
    counts = funnel(ws, [run_id] if run_id else None)
    sizes = domain_sizes(ws)
    ev = load_eval(ws, run_id)
    images = {"funnel": plot_funnel(counts, out_dir / "funnel.png").name,
              "domain_sizes": plot_domain_sizes(sizes, out_dir / "domain_sizes.png").name}
    if ev and ev["pass^k"]["overall"]["pass^k"]:
        images["passk"] = plot_passk(ev, out_dir / "passk.png").name
        images["by_calls"] = plot_by_calls(ev, out_dir / "accuracy_by_calls.png").name
    bfcl = [json.loads(p.read_text("utf-8")) for p in sorted(ws.reports_dir.glob("bfcl-*.json"))]
    cont_path = contamination_path(ws)
    cont = json.loads(cont_path.read_text("utf-8")) if cont_path.exists() else None
    md = report_markdown(run_id, counts, sizes, ev, images, bfcl, cont)
    atomic_write_text(out_dir / "report.md", md)
    atomic_write_text(out_dir / "report.html", markdown_to_html(md, f"AgentScaler report {name}"))
    return {"dir": str(out_dir), "markdown": str(out_dir / "report.md"), "html": str(out_dir / "report.html"),
            "images": {k: str(out_dir / v) for k, v in images.items()}, "funnel": counts, "has_eval": ev is not None}
