"""Environment and scenario quality (issue 18): do the environments behave like the APIs they come from?

    .venv/bin/python benchmarks/bench_env_quality.py --real                   # BFCL + tau2 + NESTFUL, built here
    .venv/bin/python benchmarks/bench_env_quality.py --synthetic 3000         # ToolBench-format corpus, built here
    .venv/bin/python benchmarks/bench_env_quality.py --workspace WS           # an already built workspace
    .venv/bin/python benchmarks/bench_env_quality.py --labelled-only          # read/write classification only
    .venv/bin/python benchmarks/bench_env_quality.py --quick                  # 30 domains of a built real workspace
                                   # (--workspace, else $AGENTSCALER_BENCH_WORKSPACE, else ./workspace)

Per domain and overall, with the distribution and the worst 10 domains by each metric (with why):
- id coherence (tasks.environments.quality): id parameters that resolve to a seed row or a created id;
- write observability (same module): write tools whose effect some read shows;
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
benchmarks/results/env_quality.md, the headline figures to env_quality.json (benchmarks/results_io's
shape) and every detail to env_quality.detail.json (what --before and --render read).
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

from agentscaler.artifacts import load_scenarios  # noqa: E402
from benchmarks.results_io import RESULTS, Figure, Recorder  # noqa: E402
from agentscaler.models import Tool  # noqa: E402
from agentscaler.workspace import Workspace  # noqa: E402
from envs.episode import Environment  # noqa: E402
from envs.spec import DomainSpec  # noqa: E402
from tasks.environments.quality import environment_quality, unobserved_why  # noqa: E402
from tasks.environments.verbs import classify  # noqa: E402
from tasks.rollouts.gold import gold_trajectory  # noqa: E402
from tasks.scenarios.arguments import StateView  # noqa: E402
from tasks.scenarios.quality import is_empty, scenario_quality  # noqa: E402
from tasks.verify.replay import Replayer  # noqa: E402
from tasks.verify.verify import verify_trajectories  # noqa: E402

LABELLED = ROOT / "tests" / "data" / "labelled_kinds.json"
METRICS = [("id_coherence", "id coherence", 0.95), ("write_observability", "write observability", 0.95),
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
    disc = discover(ws, draw=False)
    out["discover_s"], out["domains"] = round(time.perf_counter() - t, 1), disc.get("domains")
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


CAUSES = {"no read tool in the domain": "no read tool in the domain",
          "no read about": "no read about the changed table in the domain",
          "no read shows": "a read about it shows no change", "write failed": "the write failed",
          "changed nothing": "the write changed nothing", "no call changed": "the write changed nothing"}


def unobserved_causes(spec: DomainSpec | None, unobserved: dict[str, str]) -> dict[str, int]:
    """Unobserved writes by cause. A reason recorded before the "no read about" split (an older
    result) is split again from the spec's reads and plans, in place."""
    out: Counter = Counter()
    reads = [t for t in spec.tools if t.kind == "read"] if spec else []
    plans = ((spec.report or {}).get("plans") or {}) if spec else {}
    for name, why_ in unobserved.items():
        if spec is not None and why_.startswith("no read shows the change to ["):
            tables = [t.strip(" '\"") for t in why_.split("[", 1)[1].rstrip("]").split(",")]
            why_ = unobserved[name] = unobserved_why(tables, reads, plans)
        out[next((v for k, v in CAUSES.items() if k in why_), "other")] += 1
    return dict(out)


# --- one domain --------------------------------------------------------------------------------------
def measure_domain(ws: Workspace, did: str, unsafe: bool) -> dict[str, Any]:
    d = ws.domain_dir(did)
    spec = DomainSpec.load(d)
    scen = load_scenarios(ws, did)
    row: dict[str, Any] = {"domain": did, "name": spec.name, "synthesizer": spec.synthesizer, "tools": len(spec.tools),
                           "tables": [t.name for t in spec.tables]}
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
        row.update(environment_quality(env, spec, state))
        row["unobserved_causes"] = unobserved_causes(spec, row.get("unobserved") or {})
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
            "execute_rate": round(ex_num / ex_den, 4) if ex_den else None,
            "chain_share": ratio("chained", "multi_call"), "multi_call": sum(r.get("multi_call", 0) for r in rows),
            "nonempty_read_share": ratio("gold_reads_nonempty", "gold_reads"),
            "gold_reads": sum(r.get("gold_reads", 0) for r in rows),
            "scenarios_all_reads_empty": sum(r.get("scenarios_all_reads_empty", 0) for r in rows),
            "replay_verified": ratio("replays_verified", "replays"), "replays": sum(r.get("replays", 0) for r in rows),
            "scenarios": sum(r.get("scenarios", 0) for r in rows), "kinds": dict(kinds),
            "unobserved_causes": dict(causes.most_common())}


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
            f"{pct(p['write_observability'])} ({p['writes']} writes) | {pct(p['execute_rate'])} | "
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
        out += ["| group | domains | tools | id coherence | write observability | execution | chain share | "
                "non-empty gold reads | gold replays verified | scenarios | kinds |", "|" + "---|" * 11]
        for g, rs in groups.items():
            if rs:
                out.append(_pooled_row(g, pooled(rs)))
        before = (res.get("before") or {}).get(name)
        if before:
            b = before["build"] or {}
            out += ["", f"Before (the code this branch started from, same corpus, same metrics; {before['when']}, "
                        f"{before['machine']}; build: synthesize {b.get('synthesize_s', '?')} s, scenarios "
                        f"{b.get('scenarios_s', '?')} s):", "",
                    "| group | domains | tools | id coherence | write observability | execution | chain share | "
                    "non-empty gold reads | gold replays verified | scenarios | kinds |", "|" + "---|" * 11]
            for g, rs in _group_rows(before["domains"]).items():
                if rs:
                    out.append(_pooled_row(g + " (before)", pooled(rs)))
        syn = groups["synthesized"]
        p = pooled(syn)
        if p["writes"]:
            none = p["unobserved_causes"].get(CAUSES["no read tool in the domain"], 0) + \
                p["unobserved_causes"].get(CAUSES["no read about"], 0)
            seen = round(p["write_observability"] * p["writes"])
            out += ["", f"Unobserved synthesized writes by cause: {p['unobserved_causes']}. {none} of {p['writes']} "
                        f"writes have no read about what they change in their domain (the corpus gave none), so "
                        f"the share any synthesis could show is at most {pct((p['writes'] - none) / p['writes'])}; "
                        f"of the writes some read is about, {seen} / {p['writes'] - none} "
                        f"({pct(seen / max(1, p['writes'] - none))}) are shown."]
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


def measure_workspace(ws: Workspace, unsafe: bool, limit: int | None = None) -> list[dict[str, Any]]:
    rows = []
    ids = ws.domain_ids()[:limit] if limit else ws.domain_ids()
    for i, did in enumerate(ids):
        try:
            rows.append(measure_domain(ws, did, unsafe))
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
    ap.add_argument("--labelled-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="measure 30 domains of an already built real workspace")
    ap.add_argument("--per-domain", type=int, default=20)
    ap.add_argument("--limit", type=int, default=None, help="measure at most N domains per workspace")
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
    if args.quick and not (args.workspace or args.real or args.synthetic):
        ws = Path(os.environ.get("AGENTSCALER_BENCH_WORKSPACE") or ROOT / "workspace")
        if not (ws / "domains").is_dir():
            raise SystemExit(f"no built workspace at {ws} (run `make demo`, or pass --workspace / set "
                             "AGENTSCALER_BENCH_WORKSPACE)")
        args.workspace, args.limit = [ws], args.limit or 30
    if args.render:
        render(args.render, args.keep, args.out)
        return
    unsafe = os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"
    with Recorder("env_quality") as rec:
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
            if args.synthetic:
                from benchmarks.bench_ingest import synth_toolbench

                folder = base / "toolbench"
                synth_toolbench(folder, args.synthetic)
                todo.append((f"synthetic ToolBench corpus, {args.synthetic} tools", Workspace(base / "synthetic"),
                             [str(folder)]))
            for w in args.workspace:
                todo.append((f"workspace {w}", Workspace(w), None))
            for name, ws, sources in todo:
                part: dict[str, Any] = {}
                if sources is not None:
                    print(f"building {name} ({load()})", file=sys.stderr)
                    part["build"] = build(ws, sources, args.per_domain, unsafe)
                    if args.real and "real" in name:
                        tau2_verticals(ws)
                print(f"measuring {name} ({load()})", file=sys.stderr)
                t = time.perf_counter()
                part["domains"] = measure_workspace(ws, unsafe, args.limit)
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
    figures(rec, res, args.limit, args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".detail.json").write_text(json.dumps(res, indent=1, default=str))
    if args.out == RESULTS / "env_quality.md":
        rec.write(markdown(res), out_dir=args.out.parent)
    else:
        args.out.write_text(markdown(res))
    print(args.out.read_text())


def figures(rec: Recorder, res: dict[str, Any], limit: int | None, quick: bool) -> None:
    """The headline figures (issue 18's aims) per corpus, pooled over its domains."""
    lab = res["labelled"]
    rec.figures.append(Figure(name="read/write classification, hand-labelled real tools", value=lab["correct"] / lab["tools"] * 100,
                              unit="%", workload=f"real: {lab['tools']} hand-labelled tools (tests/data/labelled_kinds.json)",
                              aim=">= 98%", meets_aim=lab["correct"] / lab["tools"] >= 0.98))
    aims = {"id_coherence": (">= 95%", 0.95), "write_observability": (">= 95%", 0.95), "execute_rate": (None, None),
            "chain_share": (">= 40%", 0.40), "nonempty_read_share": (">= 90%", 0.90), "replay_verified": ("100%", 1.0)}
    for name, part in res["corpora"].items():
        p = pooled([r for r in part["domains"] if "error" not in r])
        real = "synthetic" not in name
        label = "a built workspace (the real corpora unless told otherwise)" if name.startswith("workspace ") else name
        wl = (f"{'real' if real else 'fixture'}: {label}, {p['domains']} domains"
              + (f" (first {limit})" if limit else "") + (" (quick)" if quick else ""))
        for metric, (aim, bar) in aims.items():
            if p.get(metric) is None:
                continue
            rec.figures.append(Figure(name=metric.replace("_", " "), value=p[metric] * 100, unit="%", workload=wl,
                                      aim=aim, meets_aim=None if bar is None else p[metric] >= bar))
    rec.layers = ["sandbox for execution and gold replays: " + ("off" if os.environ.get("AGENTSCALER_UNSAFE_SANDBOX") == "1"
                                                                 else "bwrap + seccomp + rlimits"), "replay verification"]


if __name__ == "__main__":
    main()
