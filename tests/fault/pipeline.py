"""The plain pipeline stages on a small fixture corpus, run as a child process that may be killed.

    python -m tests.fault.pipeline WS LLM_URL [--stage-log FILE]

Stages: ingest -> discover (fast embedding) -> synthesize (rules) -> scenarios -> rollouts
(scripted user, the oracle agent of tests/fault/faulty_llm.py) -> verify -> SFT export.
Each stage appends its name to the stage log when it starts, so a killer knows where it hit.
`snapshot(ws)` lists what a finished run left (ids and content hashes) and every duplicate,
missing or inconsistent item, to compare a killed-and-resumed run with a clean one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPORA = [ROOT / "tests" / "data" / "corpora" / d for d in ("openai", "mcp", "tau2")]
STAGES = ("ingest", "discover", "synthesize", "scenarios", "rollout", "verify", "export")
RUN_ID = "rfault"


def run_pipeline(ws_root: Path | str, llm_url: str, stage_log: Path | str | None = None,
                 per_domain: int = 3, corpora: list[Path] | None = None, until: str = "export") -> dict[str, Any]:
    from agentscaler.workspace import Workspace
    from tasks.corpus.ingest import ingest
    from tasks.discover.config import DiscoverConfig
    from tasks.discover.discover import discover
    from tasks.environments.synthesize import synthesize_all
    from tasks.rollouts.conversation import RolloutConfig
    from tasks.rollouts.engine import run_rollouts
    from tasks.scenarios.build import build_all
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tasks.verify.verify import verify_run

    ws = Workspace(ws_root)

    def mark(stage: str) -> None:
        if stage_log:
            with open(stage_log, "a") as fh:
                fh.write(f"{stage} {time.time():.3f}\n")
                fh.flush()

    out: dict[str, Any] = {}
    mark("ingest")
    out["ingest"] = ingest(ws, [str(p) for p in (corpora or CORPORA)])
    if until == "ingest":
        mark("finished")
        return out
    mark("discover")
    out["discover"] = discover(ws, cfg=DiscoverConfig(embedding="fast"), draw=False)
    if until == "discover":
        mark("finished")
        return out
    mark("synthesize")
    out["synthesize"] = synthesize_all(ws, synth="rules", seed=0)
    if until == "synthesize":
        mark("finished")
        return out
    mark("scenarios")
    out["scenarios"] = build_all(ws, per_domain=per_domain, max_length=3, seed=0, heldout_fraction=0.0)
    if until == "scenarios":
        mark("finished")
        return out
    mark("rollout")
    out["rollout"] = run_rollouts(ws, llm_url, model="faulty", split="all", run_id=RUN_ID, concurrency=2,
                                  timeout=20, use_cache=False,
                                  cfg=RolloutConfig(max_turns=3, max_steps=4, retry_wait=0.05))
    if until == "rollout":
        mark("finished")
        return out
    mark("verify")
    out["verify"] = verify_run(ws, RUN_ID, embed=True)
    if until == "verify":
        mark("finished")
        return out
    mark("export")
    check_contamination(ws, sources=("tau2",))  # every flow screens before it exports (cached by content)
    out["export"] = export_sft(ws, eval_fraction=0.0)
    mark("finished")
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def snapshot(ws_root: Path | str) -> dict[str, Any]:
    """Ids and hashes of everything a run left, plus a list of problems (duplicates, gaps, leftovers)."""
    import pandas as pd

    from agentscaler.catalog import Catalog
    from agentscaler.workspace import Workspace

    ws = Workspace(ws_root)
    problems: list[str] = []
    snap: dict[str, Any] = {"problems": problems}
    tools = pd.read_parquet(ws.tools_path) if ws.tools_path.exists() else None
    snap["tools"] = sorted(tools["id"]) if tools is not None else []
    if len(snap["tools"]) != len(set(snap["tools"])):
        problems.append("duplicate tool ids in tools.parquet")
    records = json.loads(ws.domains_path.read_text()) if ws.domains_path.exists() else []
    snap["discovered"] = sorted(r["domain"] for r in records)
    snap["domains"] = {}
    snap["scenarios"] = {}
    for d in ws.domain_ids():
        spec = json.loads((ws.domain_dir(d) / "spec.json").read_text())
        snap["domains"][d] = {"content_id": spec["report"].get("content_id"),
                              "tools_py": _sha(ws.domain_dir(d) / "tools.py"),
                              "seed": _sha(ws.domain_dir(d) / "seed.sqlite")}
        p = ws.domain_dir(d) / "scenarios.jsonl"
        if p.exists():
            ids = [json.loads(line)["id"] for line in p.read_text().splitlines() if line.strip()]
            if len(ids) != len(set(ids)):
                problems.append(f"duplicate scenario ids in {d}")
            snap["scenarios"][d] = {"ids": sorted(ids), "file": _sha(p)}
    # garbage a killed process may leave (never under a final name): counted, not a data problem
    snap["leftovers"] = sorted(str(p.relative_to(ws.root)) for p in
                               list(ws.root.rglob(".*.tmp")) + list((ws.cache_dir / "synth").glob("*")))
    for d in snap["discovered"]:
        dd = ws.domain_dir(d)
        if dd.exists() and not (dd / "spec.json").exists() and any(dd.glob("*.py")):
            snap.setdefault("unfinished", []).append(d)  # files without spec.json: not finished, rebuilt on resume
    tpath = ws.rollout_dir(RUN_ID) / "trajectories.jsonl"
    trajs = [json.loads(line) for line in tpath.read_text().splitlines() if line.strip()] if tpath.exists() else []
    tids = [t["id"] for t in trajs]
    if len(tids) != len(set(tids)):
        problems.append(f"duplicate trajectory ids: {[k for k, n in Counter(tids).items() if n > 1]}")
    snap["trajectories"] = sorted(tids)
    snap["passed"] = sorted(t["id"] for t in trajs if (t.get("verdict") or {}).get("passed"))
    snap["sft"] = {}
    for stage in (1, 2):
        rows: list[str] = []
        for split in ("train", "eval"):
            f = ws.sft_dir / f"stage{stage}" / f"{split}.parquet"
            if f.exists():
                rows += list(pd.read_parquet(f)["id"])
        if len(rows) != len(set(rows)):
            problems.append(f"duplicate SFT rows in stage{stage}")
        snap["sft"][stage] = sorted(rows)
    cat = Catalog(ws.catalog_path)
    rows = cat.domains()
    keys = [(r["domain"], r["stage"]) for r in rows]
    if len(keys) != len(set(keys)):
        problems.append("duplicate catalog rows")
    for d in snap["domains"]:
        st = cat.stage_status(d, "synthesize")
        if not st or st["status"] != "done":
            problems.append(f"catalog: finished domain {d} is {st and st['status']} in synthesize")
        elif st["artifact"] != snap["domains"][d]["content_id"]:
            problems.append(f"catalog: domain {d} artifact {st['artifact']} != spec {snap['domains'][d]['content_id']}")
    for d, sc in snap["scenarios"].items():
        st = cat.stage_status(d, "scenarios")
        if not st or st["status"] != "done":
            problems.append(f"catalog: domain {d} has scenarios but is {st and st['status']} in scenarios")
    snap["catalog"] = sorted((r["domain"], r["stage"], r["status"], r["artifact"]) for r in rows)
    return snap


def compare(clean: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Differences that mean data lost, duplicated or changed (catalog attempts may differ)."""
    diffs = list(other["problems"])
    for key in ("tools", "discovered", "domains", "scenarios", "trajectories", "passed", "sft"):
        a, b = clean[key], other[key]
        if a != b:
            if isinstance(a, list):
                diffs.append(f"{key}: missing {sorted(set(a) - set(b))[:5]} extra {sorted(set(b) - set(a))[:5]}")
            else:
                diffs.append(f"{key}: differs ({json.dumps(a, sort_keys=True)[:200]} vs {json.dumps(b, sort_keys=True)[:200]})")
    if clean["catalog"] != other["catalog"]:
        diffs.append("catalog: stage statuses/artifacts differ")
    return diffs


def lost_and_duplicated(clean: dict[str, Any], other: dict[str, Any]) -> tuple[int, int]:
    """Items of a clean run missing from `other`, and items present more than once in `other`."""
    lost = len(set(clean["domains"]) - set(other["domains"]))
    lost += sum(len(set(v["ids"]) - set(other["scenarios"].get(d, {}).get("ids", []))) for d, v in clean["scenarios"].items())
    lost += len(set(clean["trajectories"]) - set(other["trajectories"]))
    lost += sum(len(set(v) - set(other["sft"].get(k, []))) for k, v in clean["sft"].items())
    dups = sum(1 for p in other["problems"] if p.startswith("duplicate"))
    return lost, dups


def _count_builds(path: Path) -> None:
    """Instrument this process: log each seed database built for a domain and each scenario generation."""
    import envs.store
    import tasks.scenarios.build

    real_seed, real_generate = envs.store.build_seed, tasks.scenarios.build.generate

    def log(kind: str, name: str) -> None:
        with open(path, "a") as fh:
            fh.write(f"{kind} {name} {os.getpid()}\n")

    def build_seed(spec, rows, dest, *a, **k):  # noqa: ANN001
        if Path(dest).parent.parent.name == "synth":
            log("synthesize", Path(dest).parent.name.rsplit(".", 1)[0])
        return real_seed(spec, rows, dest, *a, **k)

    def generate(env, spec, domain_dir, domain_id, *a, **k):  # noqa: ANN001
        log("scenarios", domain_id)
        return real_generate(env, spec, domain_dir, domain_id, *a, **k)

    envs.store.build_seed, tasks.scenarios.build.generate = build_seed, generate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workspace")
    ap.add_argument("llm_url")
    ap.add_argument("--stage-log")
    ap.add_argument("--until", default="export", choices=STAGES)
    ap.add_argument("--count-builds", help="append one line per environment / scenario file actually built")
    a = ap.parse_args()
    if a.count_builds:
        _count_builds(Path(a.count_builds))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    out = run_pipeline(a.workspace, a.llm_url, a.stage_log, until=a.until)
    print(json.dumps({k: (v.get("skipped") if isinstance(v, dict) else None) for k, v in out.items()}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()


def integrity(ws_root: Path | str) -> dict[str, Any]:
    """What a crash or a full disk may have left under a *final* name, half-written (must be nothing).

    Returns {"problems": [...], "torn_lines": n}; a torn last line of an append-only JSONL file is
    allowed (the writer cuts it on the next start) and counted."""
    import sqlite3

    import pandas as pd

    from agentscaler.workspace import Workspace

    ws = Workspace(ws_root)
    problems: list[str] = []
    torn = 0

    def check(label: str, fn) -> None:  # noqa: ANN001
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the point is to list them
            problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:150]}")

    if ws.tools_path.exists():
        check("tools.parquet", lambda: pd.read_parquet(ws.tools_path))
    for p in (ws.corpus_report_path, ws.domains_path, ws.graph_dir / "report.json"):
        if p.exists():
            check(str(p.relative_to(ws.root)), lambda p=p: json.loads(p.read_text()))
    for d in ws.domain_ids():
        dd = ws.domain_dir(d)
        check(f"{d}/spec.json", lambda dd=dd: json.loads((dd / "spec.json").read_text())["report"]["content_id"])
        for name in ("models.py", "tools.py"):
            check(f"{d}/{name}", lambda dd=dd, name=name: compile((dd / name).read_text(), name, "exec"))

        def seed_ok(dd: Path = dd) -> None:
            con = sqlite3.connect(f"file:{dd / 'seed.sqlite'}?mode=ro", uri=True)
            try:
                assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            finally:
                con.close()
        check(f"{d}/seed.sqlite", seed_ok)
        sc, meta = dd / "scenarios.jsonl", dd / "scenarios.meta.json"
        if meta.exists():
            check(f"{d}/scenarios.meta.json", lambda sc=sc, meta=meta: _assert(
                json.loads(meta.read_text())["file_hash"] == _sha(sc), "scenarios.jsonl does not match its meta"))
        if sc.exists():
            check(f"{d}/scenarios.jsonl", lambda sc=sc: [json.loads(x) for x in sc.read_text().splitlines() if x.strip()])
    for tp in ws.root.glob("rollouts/*/trajectories.jsonl"):
        lines = tp.read_bytes().split(b"\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:
                    torn += 1  # no newline yet: an append cut short
                else:
                    problems.append(f"{tp.relative_to(ws.root)}:{i + 1}: broken line in the middle")
    for rep in ws.sft_dir.glob("stage*/report.json"):
        check(str(rep.relative_to(ws.root)), lambda rep=rep: [pd.read_parquet(rep.parent / f"{s}.parquet")
                                                              for s in ("train", "eval")])
    if ws.catalog_path.exists():
        def cat_ok() -> None:
            con = sqlite3.connect(ws.catalog_path)
            try:
                assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            finally:
                con.close()
        check("catalog.sqlite", cat_ok)
    return {"problems": problems, "torn_lines": torn}


def _assert(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)
