"""Environment and scenario quality (issue 18): do the environments behave like the APIs they come from?

    .venv/bin/python benchmarks/bench_env_quality.py --real                   # BFCL + tau2 + NESTFUL, built here
    .venv/bin/python benchmarks/bench_env_quality.py --synthetic 3000         # ToolBench-format corpus, built here
    .venv/bin/python benchmarks/bench_env_quality.py --workspace WS           # an already built workspace
    .venv/bin/python benchmarks/bench_env_quality.py --workspace REAL --name "real corpora: ..." --only IDS \
        --workspace SYN30K --name "fixture/synthetic: ..." --before OLD.json --before-as "real corpora: ..."
    .venv/bin/python benchmarks/bench_env_quality.py --labelled-only          # read/write classification only
    .venv/bin/python benchmarks/bench_env_quality.py --quick                  # bounded: labelled set + the
                                                                              # services fixture corpus

Per domain and overall, with the distribution and the worst 10 domains by each metric (with why):
- id coherence (tasks.environments.quality): id parameters that resolve to a seed row or a created id;
- write observability (same module): write tools whose effect some read shows, twice side by side:
  with the corpus's reads only, and with the synthesized observers too (a `get_<entity>(id)` rule
  synthesis adds for a written entity no read of the domain is about; origin="synthesized");
- execution (tasks.environments.validate): tools whose grounded call returns a non-error, non-empty result;
- chain share (tasks.scenarios.quality): multi-call scenarios where a later call uses an entity an
  earlier call returned, created or changed; the mix of scenario kinds;
- non-empty gold reads (same module): gold read calls whose output is not empty;
- gold replays verified: each scenario's gold calls replayed as a trajectory (tasks.rollouts.gold)
  and judged by the verifier (tasks.verify.verify_trajectory);
- read/write classification (tasks.environments.verbs.classify, corpus kinds hidden) on
  tests/data/labelled_kinds.json (352 real tools labelled by hand).
Building (--real/--synthetic) runs the stage functions (synthesize_all, build_all) in this
process and times them; the machine's load average is recorded beside every figure. Results go to
benchmarks/results/env_quality.md (and .json beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentscaler.artifacts import load_domains, load_scenarios  # noqa: E402
from agentscaler.models import Tool  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from envs.episode import Environment  # noqa: E402
from benchmarks.results_io import Figure, Recorder  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from tasks.environments.plan import tool_reading  # noqa: E402
from tasks.environments.quality import environment_quality, first_writes, unobserved_why  # noqa: E402
from tasks.environments.verbs import classify  # noqa: E402
from tasks.rollouts.gold import gold_trajectory  # noqa: E402
from tasks.scenarios.arguments import StateView  # noqa: E402
from tasks.scenarios.quality import is_empty, scenario_quality  # noqa: E402
from tasks.verify.replay import Replayer  # noqa: E402
from tasks.verify.verify import verify_trajectories  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
LABELLED = ROOT / "tests" / "data" / "labelled_kinds.json"
SERVICES = ROOT / "tests" / "data" / "corpora" / "services"
METRICS = [("id_coherence", "id coherence", 0.95),
           ("write_observability", "write observability (corpus reads only)", 0.95),
           ("write_observability_with_observers", "write observability (with synthesized observers)", 0.95),
           ("execute_rate", "execution (grounded call, non-empty)", None), ("chain_share", "chain share", 0.40),
           ("nonempty_read_share", "non-empty gold reads", 0.90), ("replay_verified", "gold replays verified", 1.0)]


def load() -> str:
    return "load " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


# --- classification ----------------------------------------------------------------------------------
def labelled() -> dict[str, Any]:
    rows = json.loads(LABELLED.read_text())
    errors, by_reason = [], Counter()
    for r in rows:
        t = Tool.model_validate({**r["tool"], "kind": None})  # the corpus kind is hidden: rules only
        kind, why = classify(t)
        by_reason[why] += 1
        if kind != r["label"]:
            errors.append({"tool": t.name, "label": r["label"], "got": kind, "reason": why,
                           "ambiguous": r["ambiguous"], "note": r["note"]})
    n = len(rows)
    return {"tools": n, "writes": sum(r["label"] == "write" for r in rows),
            "ambiguous": sum(r["ambiguous"] for r in rows), "correct": n - len(errors),
            "accuracy": round((n - len(errors)) / n, 4), "errors": errors, "by_reason": dict(by_reason)}


# --- building --------------------------------------------------------------------------------------
def build(ws: Workspace, sources: list[str], per_domain: int, unsafe: bool) -> dict[str, Any]:
    """ingest -> discover -> synthesize -> scenarios with the stage functions, each timed."""
    from tasks.corpus.ingest import ingest
    from tasks.discover.discover import discover
    from tasks.environments.synthesize import synthesize_all
    from tasks.scenarios.build import build_all

    out: dict[str, Any] = {"load_before": load()}
    t = time.perf_counter()
    rep = ingest(ws, sources)
    out["ingest_s"], out["tools"] = round(time.perf_counter() - t, 1), rep["accepted"]
    t = time.perf_counter()
    disc = discover(ws, draw=False, reading=tool_reading)
    out["discover_s"], out["domains"] = round(time.perf_counter() - t, 1), disc.get("domains")
    out["shared_reads"] = disc.get("shared_reads")
    t = time.perf_counter()
    syn = synthesize_all(ws, unsafe=unsafe)
    out["synthesize_s"] = round(time.perf_counter() - t, 1)
    out["synthesized"], out["synthesis_failed"] = syn["counts"]["done"], syn["counts"]["failed"]
    out["synthesis_errors"] = [d for d in syn["domains"] if d.get("status") == "failed"][:10]
    t = time.perf_counter()
    sc = build_all(ws, per_domain=per_domain, unsafe=unsafe)
    out["scenarios_s"] = round(time.perf_counter() - t, 1)
    out["scenarios"], out["scenario_domains_failed"] = sc["scenarios"], len(sc["failed"])
    out["build_s"] = round(out["synthesize_s"] + out["scenarios_s"], 1)
    out["load_after"] = load()
    return out


def compare_build(base: Path, sources: list[str], per_domain: int, rounds: int = 1) -> dict[str, Any]:
    """Build time of the code in `base` (another checkout, e.g. the commit this branch started from)
    and of this checkout, side by side on one corpus: ingest + discover once, then synthesize +
    scenarios (the CLI commands, each in a fresh process) on a copy per code version, alternating."""
    import shutil
    import subprocess

    tmp = Path(tempfile.mkdtemp(prefix="bench_build_"))
    prep = Workspace(tmp / "prep")
    from tasks.corpus.ingest import ingest
    from tasks.discover.discover import discover

    ingest(prep, sources)
    discover(prep, draw=False)
    out: dict[str, Any] = {"base": str(base), "rounds": []}
    for r in range(rounds):
        for label, code in (("before", base), ("after", ROOT)):
            ws = tmp / f"{label}{r}"
            shutil.copytree(prep.root, ws)
            env = {**os.environ, "PYTHONPATH": str(code)}
            times = {"load_before": load()}
            for cmd in (["synthesize", "--json"], ["scenarios", "--per-domain", str(per_domain), "--json"]):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-c", "from flows.cli import app; app()", "-w", str(ws), *cmd],
                               cwd=code, env=env, check=True, capture_output=True)
                times[cmd[0] + "_s"] = round(time.perf_counter() - t, 1)
            times["load_after"] = load()
            out["rounds"].append({"code": label, **times})
            shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def tau2_verticals(ws: Workspace) -> list[str]:
    """The imported tau2 verticals (airline, retail) added to the workspace, with tau2's tasks."""
    from flows.pipeline import add_tau2_verticals

    add_tau2_verticals(ws)
    return [d for d in ws.domain_ids() if d.startswith("tau2")]


CAUSES = {"no read in the corpus": "unobservable: no read in the corpus",
          "no read tool in the domain": "no read tool in the domain",
          "no read about": "no read about the changed table in the domain",
          "no read shows": "a read about it shows no change", "write failed": "the write failed",
          "changed nothing": "the write changed nothing", "no call changed": "the write changed nothing"}


def unobserved_causes(spec: DomainSpec | None, unobserved: dict[str, str],
                      no_corpus_read: set[str] = frozenset()) -> dict[str, int]:
    """Unobserved writes by cause. A reason recorded before the "no read about" split (an older
    result) is split again from the spec's reads and plans, in place; a write discovery found no
    read about anywhere in the corpus (`no_corpus_read`) is "unobservable: no read in the corpus"."""
    out: Counter = Counter()
    reads = [t for t in spec.tools if t.kind == "read"] if spec else []
    plans = ((spec.report or {}).get("plans") or {}) if spec else {}
    for name, why_ in unobserved.items():
        if spec is not None and why_.startswith("no read shows the change to ["):
            tables = [t.strip(" '\"") for t in why_.split("[", 1)[1].rstrip("]").split(",")]
            why_ = unobserved[name] = unobserved_why(tables, reads, plans)
        if name in no_corpus_read and not why_.startswith("write failed"):
            why_ = unobserved[name] = f"no read in the corpus ({why_})"
        out[_cause(why_)] += 1
    return dict(out)


# --- one domain --------------------------------------------------------------------------------------
def measure_domain(ws: Workspace, did: str, unsafe: bool,
                   records: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    d = ws.domain_dir(did)
    rec = (records or {}).get(did) or {}
    spec = DomainSpec.load(d)
    scen = load_scenarios(ws, did)
    row: dict[str, Any] = {"domain": did, "name": spec.name, "synthesizer": spec.synthesizer, "tools": len(spec.tools),
                           "tables": [t.name for t in spec.tables], "shared_reads": len(rec.get("shared") or []),
                           "unobservable_in_corpus": len(rec.get("unobservable") or [])}
    v = spec.report.get("validation") or {}
    if v:
        per = v.get("tools") or {}
        row["execute_rate"] = v.get("execute_rate")
        row["not_executing"] = {k: (r.get("reason") or "empty result") for k, r in per.items()
                                if not r.get("executes")}
    env = Environment.open(d, unsafe=unsafe)
    try:
        state = StateView(spec, d / spec.seed_path)
        t0 = time.perf_counter()
        row.update(environment_quality(env, spec, state, examples=first_writes([s.gold_calls for s in scen])))
        row["unobserved_causes"] = unobserved_causes(spec, row.get("unobserved") or {},
                                                     {u["name"] for u in rec.get("unobservable") or []})
        row["quality_s"] = round(time.perf_counter() - t0, 3)
        sq = scenario_quality(scen)
        row.update(sq)
        empty = Counter(c.name for s in scen for c in s.gold_calls if c.kind == "read" and is_empty(c.output))
        row["empty_read_tools"] = dict(empty.most_common(3))
        # gold replay -> verifier (which replays each trajectory in the same sandbox worker)
        schemas = [t.openai_schema() for t in spec.tools]
        trajs = [gold_trajectory(s, env, schemas, "system", "bench-quality") for s in scen]
        with Replayer(ws.root / "domains", envs={did: env}) as rp:
            verify_trajectories(ws, trajs, replayer=rp)
        passed, reasons = 0, Counter()
        for t in trajs:
            passed += t.verdict.passed
            reasons.update(t.verdict.reasons)
        row["replays"] = len(scen)
        row["replays_verified"] = passed
        row["replay_verified"] = round(passed / len(scen), 4) if scen else None
        row["replay_failures"] = dict(reasons)
    finally:
        env.close()
    return row


def why(row: dict[str, Any], metric: str) -> str:
    if metric == "id_coherence":
        return ", ".join(row.get("unresolved_ids", [])[:3])
    if metric == "write_observability":
        return "; ".join(f"{k}: {v}" for k, v in list(row.get("unobserved", {}).items())[:2])
    if metric == "write_observability_with_observers":
        return "; ".join(f"{k}: {v}" for k, v in list(row.get("unobserved_with_observers", {}).items())[:2])
    if metric == "execute_rate":
        return "; ".join(f"{k}: {v}" for k, v in list(row.get("not_executing", {}).items())[:3])
    if metric == "chain_share":
        return f"kinds {row.get('kinds')}"
    if metric == "nonempty_read_share":
        return f"empty reads by tool {row.get('empty_read_tools')}"
    if metric == "replay_verified":
        return f"reasons {row.get('replay_failures')}"
    return ""


# --- report ----------------------------------------------------------------------------------------
def pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def ratio(num: str, den: str) -> float | None:
        d = sum(r.get(den) or 0 for r in rows)
        return round(sum(r.get(num) or 0 for r in rows) / d, 4) if d else None

    kinds, causes = Counter(), Counter()
    for r in rows:
        kinds.update(r.get("kinds") or {})
        causes.update(r.get("unobserved_causes") or {})
    ex_num = sum((r.get("execute_rate") or 0) * r["tools"] for r in rows if r.get("execute_rate") is not None)
    ex_den = sum(r["tools"] for r in rows if r.get("execute_rate") is not None)
    return {"domains": len(rows), "tools": sum(r["tools"] for r in rows),
            "id_coherence": ratio("id_resolved", "id_params"), "id_params": sum(r.get("id_params", 0) for r in rows),
            "write_observability": ratio("writes_observed", "writes"), "writes": sum(r.get("writes", 0) for r in rows),
            # None where the rows predate synthesized observers (a result made before them)
            "write_observability_with_observers": (ratio("writes_observed_with_observers", "writes") if any(
                "writes_observed_with_observers" in r for r in rows) else None),
            "observers": sum(r.get("observers") or 0 for r in rows),
            "execute_rate": round(ex_num / ex_den, 4) if ex_den else None,
            "chain_share": ratio("chained", "multi_call"), "multi_call": sum(r.get("multi_call", 0) for r in rows),
            "nonempty_read_share": ratio("gold_reads_nonempty", "gold_reads"),
            "gold_reads": sum(r.get("gold_reads", 0) for r in rows),
            "scenarios_all_reads_empty": sum(r.get("scenarios_all_reads_empty", 0) for r in rows),
            "replay_verified": ratio("replays_verified", "replays"), "replays": sum(r.get("replays", 0) for r in rows),
            "scenarios": sum(r.get("scenarios", 0) for r in rows), "kinds": dict(kinds),
            "unobserved_causes": dict(causes.most_common())}


def ceiling(p: dict[str, Any]) -> dict[str, Any]:
    """How many writes any synthesis could show: those some read of their domain is about, and
    (the corpus ceiling) those some read of the corpus is about; the share of those shown."""
    causes, n = p["unobserved_causes"], p["writes"]
    corpus = causes.get(CAUSES["no read in the corpus"], 0)
    domain = causes.get(CAUSES["no read tool in the domain"], 0) + causes.get(CAUSES["no read about"], 0)
    seen = round((p["write_observability"] or 0) * n)
    observable = n - corpus - domain
    return {"no_read_in_corpus": corpus, "no_read_in_domain": domain, "seen": seen, "observable": observable,
            "ceiling": (n - corpus - domain) / n if n else None, "corpus_ceiling": (n - corpus) / n if n else None,
            "observable_shown": seen / observable if observable else None}


def _cause(why_: str) -> str:
    return next((v for k, v in CAUSES.items() if k in why_), "other")


def not_exercised(p: dict[str, Any]) -> list[str]:
    """The metrics a corpus cannot exercise (their denominator is 0), said plainly."""
    out = []
    if not p["id_params"]:
        out.append("id coherence (no id parameters)")
    if not p["writes"]:
        out.append("write observability, both ways (no write tools)")
    if not p["multi_call"]:
        out.append("chain share (no multi-call scenarios)")
    elif not p["kinds"].get("create_then_change"):
        out.append("create-then-change chains (no write creates what a later call uses)")
    if not p["gold_reads"]:
        out.append("non-empty gold reads (no gold read calls)")
    return out


def dist(rows: list[dict[str, Any]], metric: str) -> str:
    xs = sorted(r[metric] for r in rows if r.get(metric) is not None)
    if not xs:
        return "-"
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return (f"min {xs[0]:.2f} · p10 {q(0.1):.2f} · p25 {q(0.25):.2f} · median {statistics.median(xs):.2f} · "
            f"mean {statistics.mean(xs):.2f} · at 1.0: {sum(x >= 0.9999 for x in xs)}/{len(xs)}")


def pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _group_rows(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {"synthesized": [r for r in rows if r["synthesizer"] != "tau2"],
            "imported (tau2 verticals)": [r for r in rows if r["synthesizer"] == "tau2"]}


def _pooled_row(label: str, p: dict[str, Any]) -> str:
    return (f"| {label} | {p['domains']} | {p['tools']} | {pct(p['id_coherence'])} ({p['id_params']} ids) | "
            f"{pct(p['write_observability'])} ({p['writes']} writes) | {pct(p['write_observability_with_observers'])} "
            f"({p['observers']} observers) | {pct(p['execute_rate'])} | "
            f"{pct(p['chain_share'])} ({p['multi_call']} multi-call) | {pct(p['nonempty_read_share'])} "
            f"({p['gold_reads']} reads; {p['scenarios_all_reads_empty']} scenarios all empty) | "
            f"{pct(p['replay_verified'])} ({p['replays']}) | {p['scenarios']} | {p['kinds']} |")


def markdown(res: dict[str, Any]) -> str:
    out = ["# Environment and scenario quality (issue 18)", "",
           f"`benchmarks/bench_env_quality.py`, {res['when']}, {res['machine']}.", ""]
    cmp_ = res.get("build_comparison")
    if cmp_:
        out += ["## Build time, side by side (real corpora: synthesize + scenarios, CLI in fresh processes)", "",
                "| code | synthesize s | scenarios s | total s | load before | load after |", "|---|---|---|---|---|---|"]
        out += [f"| {r['code']} | {r['synthesize_s']} | {r['scenarios_s']} | "
                f"{round(r['synthesize_s'] + r['scenarios_s'], 1)} | {r['load_before']} | {r['load_after']} |"
                for r in cmp_["rounds"]]
        out.append("")
    lab = res.get("labelled")
    if lab:
        out += ["## Read/write classification on the labelled set", "",
                f"{lab['correct']} / {lab['tools']} correct (**{pct(lab['accuracy'])}**; aim >= 98%): "
                f"{lab['writes']} writes, {lab['ambiguous']} marked ambiguous by the labeller; by reason "
                f"{lab['by_reason']}. Errors:", ""]
        out += [f"- `{e['tool']}`: labelled {e['label']}, classified {e['got']} ({e['reason']})"
                + (f"; ambiguous: {e['note']}" if e["ambiguous"] else "") for e in lab["errors"]] or ["- none"]
        out.append("")
    for name, part in res.get("corpora", {}).items():
        rows = part["domains"]
        groups = _group_rows(rows)
        out += [f"## {name}", ""]
        if part.get("build"):
            b = part["build"]
            out += [f"Build: {b.get('tools')} tools -> {b.get('domains')} domains; ingest {b.get('ingest_s')} s, "
                    f"discover {b.get('discover_s')} s, synthesize {b.get('synthesize_s')} s, scenarios "
                    f"{b.get('scenarios_s')} s (build {b.get('build_s')} s); {b.get('synthesis_failed')} domains "
                    f"failed synthesis; {b.get('load_before')} before, {b.get('load_after')} after.", ""]
        out += ["| group | domains | tools | id coherence | write observability, corpus reads only | write observability, "
                "with synthesized observers | execution | chain share | non-empty gold reads | gold replays verified | "
                "scenarios | kinds |", "|" + "---|" * 12]
        for g, rs in groups.items():
            if rs:
                out.append(_pooled_row(g, pooled(rs)))
        before = (res.get("before") or {}).get(name)
        if before:
            b = before["build"] or {}
            out += ["", f"Before (the code this branch started from, same corpus, same metrics; {before['when']}, "
                        f"{before['machine']}; build: synthesize {b.get('synthesize_s', '?')} s, scenarios "
                        f"{b.get('scenarios_s', '?')} s):", "",
                    "| group | domains | tools | id coherence | write observability, corpus reads only | write "
                    "observability, with synthesized observers | execution | chain share | non-empty gold reads | "
                    "gold replays verified | scenarios | kinds |", "|" + "---|" * 12]
            for g, rs in _group_rows(before["domains"]).items():
                if rs:
                    out.append(_pooled_row(g + " (before)", pooled(rs)))
        syn = groups["synthesized"]
        p = pooled(syn)
        if p["writes"]:
            c = ceiling(p)
            out += ["", f"Unobserved synthesized writes by cause: {p['unobserved_causes']}. "
                        f"{c['no_read_in_corpus']} of {p['writes']} writes change an entity no read of the whole "
                        f"corpus is about (found by discovery; only a synthesized observer can show them) and "
                        f"{c['no_read_in_domain']} more have no read about what they change in their domain, so the "
                        f"share any synthesis could show is at most {pct(c['ceiling'])} "
                        f"(corpus ceiling {pct(c['corpus_ceiling'])}); of the writes some read is about, "
                        f"{c['seen']} / {c['observable']} ({pct(c['observable_shown'])}) are shown. Reads shared by "
                        f"discovery: {sum(r.get('shared_reads') or 0 for r in syn)} in "
                        f"{sum(bool(r.get('shared_reads')) for r in syn)} domains."]
        if p["writes"] and p["write_observability_with_observers"] is not None:
            out += ["", f"Write observability side by side: corpus reads only {pct(p['write_observability'])} "
                        f"(aim >= 95%: {'met' if p['write_observability'] >= 0.95 else 'not met'}); with the "
                        f"{p['observers']} synthesized observers (reads rule synthesis added for written records no "
                        f"read of the domain is about, origin=synthesized, not from the corpus) "
                        f"{pct(p['write_observability_with_observers'])} (aim >= 95%: "
                        f"{'met' if p['write_observability_with_observers'] >= 0.95 else 'not met'}). Unobserved "
                        f"with observers: {dict(Counter(_cause(v) for r in syn for v in (r.get('unobserved_with_observers') or {}).values()))}."]
        missing = not_exercised(p)
        if missing:
            out += ["", "Not exercised by this corpus (nothing to measure): " + "; ".join(missing) + "."]
        out += ["", "Distribution over the synthesized domains (per-domain values):", ""]
        for key, label, aim in METRICS:
            out.append(f"- {label}{' (aim ' + pct(aim) + ')' if aim else ''}: {dist(syn, key)}")
        for key, label, _ in METRICS:
            ranked = sorted([r for r in syn if r.get(key) is not None], key=lambda r: (r[key], r["domain"]))[:10]
            if not ranked or ranked[0][key] >= 0.9999:
                continue
            out += ["", f"### Worst 10 by {label}", "", "| domain | name | value | why |", "|---|---|---|---|"]
            out += [f"| {r['domain']} | {r['name']} | {pct(r[key])} | {why(r, key).replace('|', '/')[:300]} |"
                    for r in ranked if r[key] < 0.9999]
        out.append("")
    return "\n".join(out) + "\n"


def measure_workspace(ws: Workspace, unsafe: bool, limit: int | None = None,
                      only: set[str] | None = None) -> list[dict[str, Any]]:
    rows = []
    ids = [d for d in ws.domain_ids() if only is None or d in only]
    ids = ids[:limit] if limit else ids
    records = {r["domain"]: r for r in load_domains(ws)}
    for i, did in enumerate(ids):
        try:
            rows.append(measure_domain(ws, did, unsafe, records))
        except Exception as exc:  # noqa: BLE001 - a domain that cannot be measured is reported, not fatal
            rows.append({"domain": did, "name": "?", "synthesizer": "?", "tools": 0,
                         "error": f"{type(exc).__name__}: {exc}"[:300]})
        if (i + 1) % 25 == 0:
            print(f"  measured {i + 1}/{len(ids)} domains ({load()})", file=sys.stderr)
    return rows


def render(saved: Path, keep: Path | None, out: Path) -> None:
    """Markdown again from a saved result; where the built workspace is kept, each row's
    unobserved causes are recounted from its spec (results made before the causes were split)."""
    res = json.loads(saved.read_text())
    for name, part in res.get("corpora", {}).items():
        sub = "real" if name.startswith("real") else "synthetic"
        for r in part["domains"]:
            d = keep / sub / "domains" / r["domain"] if keep else None
            spec = DomainSpec.load(d) if d and (d / "spec.json").exists() else None
            r["unobserved_causes"] = unobserved_causes(spec, r.get("unobserved") or {})
    out.write_text(markdown(res))
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    print(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", action="store_true", help="build BFCL + tau2 + NESTFUL in a fresh workspace")
    ap.add_argument("--synthetic", type=int, default=0, help="build a synthetic ToolBench corpus of N tools")
    ap.add_argument("--workspace", type=Path, action="append", default=[], help="measure a built workspace")
    ap.add_argument("--name", action="append", default=[],
                    help="what each --workspace is, in order (its corpus name in the results; a name starting "
                         "'fixture' is labelled a fixture, not a real corpus)")
    ap.add_argument("--labelled-only", action="store_true")
    ap.add_argument("--per-domain", type=int, default=20)
    ap.add_argument("--limit", type=int, default=None, help="measure at most N domains per workspace")
    ap.add_argument("--only", type=Path, action="append", default=[],
                    help="a file of domain ids (one a line): measure only those; one per --workspace, in order "
                         "(a workspace without one, or '-', is measured whole; without --workspace: every corpus)")
    ap.add_argument("--quick", action="store_true",
                    help="bounded (< 3 min): the labelled set and the services fixture corpus (6 domains)")
    ap.add_argument("--keep", type=Path, default=None, help="build under this folder and keep it")
    ap.add_argument("--out", type=Path, default=RESULTS / "env_quality.md")
    ap.add_argument("--before", type=Path, default=None,
                    help="a JSON result of this script on the code before (shown side by side, per corpus name)")
    ap.add_argument("--before-as", default=None, help="the corpus name the --before result is about")
    ap.add_argument("--compare-build", type=Path, default=None,
                    help="a checkout of the code before: time its build and this one's side by side (real corpora)")
    ap.add_argument("--render", type=Path, default=None,
                    help="re-render a saved JSON result (unobserved causes split from the specs under --keep)")
    args = ap.parse_args()
    if args.render:
        render(args.render, args.keep, args.out)
        return
    unsafe = os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"
    only = [None if str(f) == "-" else set(f.read_text().split()) for f in args.only]
    rec = Recorder(args.out.stem).__enter__()
    rec.layers = ["sandbox: zygote + fresh forked child per episode" + (" (UNSAFE: off)" if unsafe else ""),
                  "gold replays verified by replay in the sandbox (tasks.verify.replay)"]
    res: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} cores, {load()}",
                           "labelled": labelled(), "corpora": {}}
    print(f"classification: {res['labelled']['correct']}/{res['labelled']['tools']}", file=sys.stderr)
    if not args.labelled_only:
        base = args.keep or Path(tempfile.mkdtemp(prefix="bench_quality_"))
        todo: list[tuple[str, Workspace, list[str] | None]] = []
        if args.real:
            from agentscaler.corpora import fetch

            for n in ("bfcl", "tau2", "nestful"):
                fetch(n)
            todo.append(("real corpora: BFCL + tau2 + NESTFUL", Workspace(base / "real"), ["bfcl", "tau2", "nestful"]))
        if args.quick:
            todo.append(("fixture: services corpus (6 hand-written domains)", Workspace(base / "services"),
                         [str(SERVICES)]))
        if args.synthetic:
            from benchmarks.bench_ingest import synth_toolbench

            folder = base / "toolbench"
            synth_toolbench(folder, args.synthetic)
            todo.append((f"synthetic ToolBench corpus, {args.synthetic} tools", Workspace(base / "synthetic"),
                         [str(folder)]))
        first = len(todo)  # --only files pair with the --workspace folders in order
        for i, w in enumerate(args.workspace):
            todo.append((args.name[i] if i < len(args.name) else f"workspace {w}", Workspace(w), None))
        for k, (name, ws, sources) in enumerate(todo):
            j = k - first if args.workspace else 0
            ids = only[j] if 0 <= j < len(only) else None
            part: dict[str, Any] = {}
            if sources is not None:
                print(f"building {name} ({load()})", file=sys.stderr)
                part["build"] = build(ws, sources, args.per_domain, unsafe)
                if args.real and "real" in name:
                    tau2_verticals(ws)
            print(f"measuring {name} ({load()})", file=sys.stderr)
            t = time.perf_counter()
            part["domains"] = measure_workspace(ws, unsafe, args.limit, ids)
            part["measure_s"] = round(time.perf_counter() - t, 1)
            part["load_after"] = load()
            res["corpora"][name] = part
    if args.compare_build:
        res["build_comparison"] = compare_build(args.compare_build, ["bfcl", "tau2", "nestful"], args.per_domain)
        print(json.dumps(res["build_comparison"], indent=1), file=sys.stderr)
    if args.before:
        prev = json.loads(args.before.read_text())
        parts = list(prev["corpora"].values())
        if parts and args.before_as:
            res["before"] = {args.before_as: {"when": prev["when"], "machine": prev["machine"],
                                              "domains": parts[0]["domains"], "build": parts[0].get("build")}}
    rec.__exit__(None, None, None)
    rec.figures = figures(res)
    rec.notes = [f"per-domain rows: {args.out.stem}.rows.json"]
    md = markdown(res)
    rec.write(md, args.out.parent)
    args.out.with_suffix(".rows.json").write_text(json.dumps(res, indent=1, default=str))
    print(md)


def figures(res: dict[str, Any]) -> list[Figure]:
    """The results_io rows: each corpus's pooled shares (synthesized and imported apart), with the
    per-domain median beside them, and the classification accuracy on the labelled set."""
    out = []
    lab = res.get("labelled")
    if lab:
        out.append(Figure(name="read/write classification", value=round(100 * lab["accuracy"], 1), unit="%",
                          workload=f"fixture: hand-labelled set of {lab['tools']} real tools", aim=">= 98% (issue 18)",
                          meets_aim=lab["accuracy"] >= 0.98))
    for name, part in res.get("corpora", {}).items():
        kind = "fixture" if name.startswith(("fixture", "synthetic")) else "real"
        for group, rows in _group_rows(part["domains"]).items():
            if not rows:
                continue
            p = pooled(rows)
            for key, label, aim in METRICS:
                if p.get(key) is None:
                    continue
                per = [r[key] for r in rows if r.get(key) is not None]
                out.append(Figure(name=f"{label}, {group}", value=round(100 * p[key], 1), unit="%",
                                  workload=f"{kind}: {name}, {len(rows)} domains (pooled; median = per-domain)",
                                  median=round(100 * statistics.median(per), 1) if per else None,
                                  aim=f">= {pct(aim)} (issue 18)" if aim else None,
                                  meets_aim=(p[key] >= aim) if aim else None))
            if p["writes"] and group == "synthesized":
                c = ceiling(p)
                if c["corpus_ceiling"] is not None:
                    out.append(Figure(name="write observability ceiling (writes some corpus read is about)",
                                      value=round(100 * c["corpus_ceiling"], 1), unit="%",
                                      workload=f"{kind}: {name}, {p['writes']} writes"))
                if c["observable_shown"] is not None:
                    out.append(Figure(name="observable writes shown (some read of the domain is about them)",
                                      value=round(100 * c["observable_shown"], 1), unit="%",
                                      workload=f"{kind}: {name}, {c['observable']} writes"))
    return out


if __name__ == "__main__":
    main()
