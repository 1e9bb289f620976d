"""Reliability and security figures (issue 11): crashes, concurrent runs, LLM faults, hostile code,
hostile corpora, a full disk. Prints the table and writes benchmarks/results/faults.md.

    .venv/bin/python benchmarks/bench_faults.py [--kills 21] [--fuzz 400] [--skip disk,concurrent,...]

The pipeline is the real plain stages (tests/fault/pipeline.py) on the fixture corpora, with the
scripted user and a scripted oracle agent endpoint (tests/fault/faulty_llm.py: no model; these
figures are about our own pipeline). Every part is bounded; the whole run takes 15-40 minutes on
2 busy cores, most of it child-process start-up (imports) and the sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.fault.crash import STAGES, child, clean_run, crash_chain, finish, source_hash  # noqa: E402
from tests.fault.faulty_llm import FaultyLLM  # noqa: E402
from tests.fault.pipeline import compare, lost_and_duplicated, snapshot  # noqa: E402

ROWS: list[dict[str, Any]] = []


def row(part: str, faults: int, survived: str, lost: int, dups: int, attacks: str = "-", fuzz: str = "-",
        note: str = "") -> None:
    ROWS.append({"part": part, "faults": faults, "survived": survived, "lost": lost, "dups": dups,
                 "attacks": attacks, "fuzz": fuzz, "note": note})
    print(f"[{time.strftime('%H:%M:%S')}] {part}: faults={faults} survived={survived} lost={lost} dups={dups} "
          f"attacks={attacks} fuzz={fuzz} {note}", flush=True)


# --- 1. crash and resume ------------------------------------------------------------------------
def make_clean(tmp: Path, k: int) -> tuple[Path, dict[str, Any], dict[str, float], float, str]:
    """A clean run of the pipeline child: (workspace, snapshot, stage seconds, seconds, source hash)."""
    ws = tmp / f"clean{k}" / "ws"
    code = source_hash()
    with FaultyLLM(ws) as srv:
        t0 = time.time()
        st = clean_run(ws, srv.url, tmp / f"clean{k}" / "ws.stages")
        sec = time.time() - t0
    snap = snapshot(ws)
    assert snap["problems"] == [], snap["problems"]
    return ws, snap, st, sec, code


def bench_crash(tmp: Path, kills: int, seed: int) -> tuple[Path, dict[str, Any], str]:
    rng = random.Random(seed)
    reruns = 0

    clean_ws, clean, stage_s, clean_s, code = make_clean(tmp, 0)
    landed, chains, survived, lost, dups, hits, diffs = 0, 0, 0, 0, 0, Counter(), []
    while landed < kills:
        if source_hash() != code:  # someone changed the pipeline's code: compare with a clean run of the new code
            reruns += 1
            clean_ws, clean, stage_s, clean_s, code = make_clean(tmp, reruns)
        chains += 1
        n = min(4, kills - landed)
        targets = sorted(rng.choices(STAGES, k=n), key=STAGES.index)
        ws = tmp / f"chain{chains}" / "ws"
        with FaultyLLM(ws) as srv:
            events = crash_chain(ws, srv.url, targets, stage_s, rng)
        got = snapshot(ws)
        if source_hash() != code:  # the code changed under this chain: not a valid comparison, redo it
            print(f"  chain {chains}: code changed during the chain, not counted", flush=True)
            shutil.rmtree(ws.parent, ignore_errors=True)
            chains -= 1
            continue
        d = compare(clean, got)
        lo, du = lost_and_duplicated(clean, got)
        lost, dups = lost + lo, dups + du
        survived += not d
        diffs += d
        for e in events:
            if e["killed"]:
                landed += 1
                hits[e["hit"]] += 1
        print(f"  chain {chains}: {events} -> {'same as clean' if not d else d}", flush=True)
        shutil.rmtree(ws.parent, ignore_errors=True)
    row("crash + resume (SIGKILL)", landed, f"{survived}/{chains} chains = clean run", lost, dups,
        note=f"kills by stage {dict(hits)}; clean run {clean_s:.0f}s; clean re-runs after code changes: {reruns}"
             + (f"; diffs {diffs[:3]}" if diffs else ""))
    return clean_ws, clean, code


# --- 2. concurrent runs ---------------------------------------------------------------------------
def bench_concurrent(tmp: Path, clean_ws: Path, clean: dict[str, Any], repeats: int) -> None:
    extra_builds, ok = 0, 0
    for r in range(repeats):
        ws = tmp / f"conc{r}" / "ws"
        for sub in ("corpus", "graph"):
            shutil.copytree(clean_ws / sub, ws / sub)
        builds = tmp / f"conc{r}" / "builds.log"
        with FaultyLLM(ws) as srv:
            procs = [child(ws, srv.url, tmp / f"conc{r}" / f"run{i}.stages", until="scenarios", count_builds=builds)
                     for i in range(2)]
            for p in procs:
                finish(p)
        lines = [ln.split() for ln in builds.read_text().splitlines()]
        kinds = Counter((k, d) for k, d, _ in lines)
        extra_builds += sum(n - 1 for n in kinds.values())
        got = snapshot(ws)
        good = not got["problems"] and got["domains"] == clean["domains"] and got["scenarios"] == clean["scenarios"] \
            and got["catalog"] == clean["catalog"]
        ok += good
    row("2 runs at once, one workspace", repeats, f"{ok}/{repeats} identical to clean", 0, extra_builds,
        note="dups = environments or scenario files built twice")


# --- 3. LLM faults --------------------------------------------------------------------------------
def bench_llm(tmp: Path, clean_ws: Path, per_kind: int) -> None:
    import pandas as pd

    from agentscaler.llm import LLMClient, LLMError
    from tests.fault.faulty_llm import FAULTS
    from tests.fault.test_llm_faults import MSGS, TOOLS, _malformed

    outcome: Counter = Counter()
    with FaultyLLM(None, hang_s=3) as srv:
        for fault in FAULTS:
            for _ in range(per_kind):
                srv.inject(fault)
                client = LLMClient(srv.url, model="faulty", timeout=1.0, max_retries=2, backoff_initial=0.01,
                                   backoff_max=0.05)

                async def go(c=client):
                    async with c:
                        return await c.chat(MSGS, tools=TOOLS, use_cache=False)
                try:
                    asyncio.run(go())
                    outcome["retried_ok"] += 1
                except LLMError as exc:
                    outcome["failed_with_reason" if str(exc) else "failed_silently"] += 1
    handled = outcome["retried_ok"] + outcome["failed_with_reason"]
    row("LLM faults, client", len(FAULTS) * per_kind, f"{handled}/{len(FAULTS) * per_kind} retried or failed w/ reason",
        0, 0, note=str(dict(outcome)))

    from agentscaler.workspace import Workspace
    from tasks.rollouts.conversation import RolloutConfig
    from tasks.rollouts.engine import run_rollouts
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tasks.verify.verify import verify_run

    ws_root = tmp / "llmws"
    shutil.copytree(clean_ws, ws_root, ignore=shutil.ignore_patterns("rollouts", "sft"))
    ws = Workspace(ws_root)
    with FaultyLLM(ws_root, fault_rate=0.35, hang_s=3, seed=11) as srv:
        rep = run_rollouts(ws, srv.url, model="faulty", split="all", trials=4, run_id="rfaults", concurrency=2,
                           timeout=1.0, use_cache=False,
                           cfg=RolloutConfig(max_turns=3, max_steps=4, retry_wait=0.01, turn_retries=2))
        injected = srv.faults_served()
    verify_run(ws, "rfaults")
    check_contamination(ws, sources=("tau2",))  # the export refuses unscreened workspaces
    export_sft(ws, run_ids=["rfaults"], eval_fraction=0.0)
    rows = pd.concat([pd.read_parquet(ws.sft_dir / "stage1" / f"{s}.parquet") for s in ("train", "eval")])
    bad = sum(_malformed(m.get("content") or "") for msgs in rows["messages"] for m in msgs)
    trajs = [json.loads(x) for x in (ws.rollout_dir("rfaults") / "trajectories.jsonl").read_text().splitlines()]
    ends = Counter(t["end_reason"] for t in trajs)
    row("LLM faults, rollout -> verify -> SFT", injected, f"{rep['written']}/{rep['planned']} conversations recorded",
        rep["planned"] - rep["written"], len(trajs) - len({t['id'] for t in trajs}),
        note=f"{len(rows)} SFT rows, {bad} with malformed output; ends {dict(ends)}")


# --- 4. hostile code ------------------------------------------------------------------------------
def bench_hostile(tmp: Path) -> None:
    from agentscaler.workspace import Workspace
    from envs.episode import Environment
    from envs.sandbox import bwrap_works
    from tasks.environments.synthesize import synthesize_domain
    from tests.fault.hostile import (ATTACKS, CASES, GOOD_CODE, RECORD, TABLES, TOOLS, ScriptedModel, _write_attacks,
                                     canaries, synthesize_hostile)
    from tests.fault.hostile import ROWS as SEED_ROWS

    if not bwrap_works():
        row("hostile generated code", 0, "skipped: no bubblewrap", 0, 0)
        return
    layers: Counter = Counter()
    contained = 0
    for attack in ATTACKS:
        cdir = tmp / "canary" / attack
        before = canaries(cdir)
        res = synthesize_hostile(Workspace(tmp / "hws" / attack), attack, cdir)
        intact = canaries(cdir) == before
        layers[res["layer"]] += 1
        # contained: the domain failed with a reason, or the code was harmless inside the sandbox
        contained += intact and ((res["failed"] and res["catalog"] == "failed") or res["layer"] == "none")
        if res["layer"] == "none":
            print(f"  {attack}: accepted (harmless in the sandbox)", flush=True)
    ws = Workspace(tmp / "llmdom" / "ws")
    spec = synthesize_domain(ws, RECORD, TOOLS, synth="llm",
                             synth_options={"client": ScriptedModel([TABLES, GOOD_CODE, SEED_ROWS]),
                                            "config": {"max_rounds": 1}})
    dest = tmp / "llmdom" / "attacked" / spec.id
    shutil.copytree(ws.domain_dir(spec.id), dest)
    _write_attacks(dest)
    env = Environment.open(dest, time_limit=1.0, memory_mb=512)
    env.reset()
    env_ok = 0
    try:
        for attack, fragment, _ in CASES:
            res = env.call(f"attack_{attack}", {})
            after = env.call("get_user", {"user_id": "u1"})
            env_ok += (not res.ok and any(f in (res.error or "") for f in fragment.split("|"))
                       and after.ok and after.content["name"] == "Ada")
    finally:
        env.close()
    n = len(ATTACKS) + len(CASES)
    row("hostile code (LLM synth + Environment)", n, f"{contained + env_ok}/{n} contained", 0, 0,
        attacks=f"{n} tried, {contained + env_ok} contained",
        note=f"synth path: {dict(layers)} (static check / sandbox validation / accepted harmless); "
             f"Environment on an LLM domain: {env_ok}/{len(CASES)}")


# --- 5. fuzz ---------------------------------------------------------------------------------------
def bench_fuzz(n: int) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tasks.corpus.loaders import FORMATS
    from tests.fault import fuzz

    cfg = settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    fmt = st.sampled_from(("auto",) + FORMATS)
    props = [
        given(st.binary(max_size=2000), st.sampled_from([".json", ".jsonl", ".py", ".txt"]), fmt)(fuzz.loader_bytes),
        given(fuzz.json_value, fmt, st.booleans())(fuzz.loader_json),
        given(st.sampled_from(sorted(fuzz.FIXTURES)), st.integers(0, 2**32), st.integers(1, 8))(fuzz.loader_mutated),
        given(fuzz.server_reply)(fuzz.reply_parser),
        given(fuzz.hermes_text)(fuzz.hermes_parser),
        given(st.text(max_size=80), st.one_of(st.none(), st.just({"type": "object"})))(fuzz.json_reply_parser),
        given(st.lists(fuzz.message, max_size=6), st.lists(fuzz.json_value, max_size=2))(fuzz.sft_row),
    ]
    crashes = []
    for p in props:
        try:
            cfg(p)()
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, reported in the table
            crashes.append(f"{p.__name__}: {type(exc).__name__}: {str(exc)[:200]}")
    total = sum(fuzz.TRIED.values())
    row("hostile corpora + replies (fuzz)", total, f"{len(props) - len(crashes)}/{len(props)} properties hold", 0, 0,
        fuzz=f"{total} inputs", note=(str(dict(fuzz.TRIED)) + ("; CRASHES: " + "; ".join(crashes) if crashes else "")))


# --- 6. disk full -----------------------------------------------------------------------------------
def bench_disk(tmp: Path, clean: dict[str, Any], sizes: list[str]) -> None:
    out = tmp / "disk.json"
    p = subprocess.run(["unshare", "-m", sys.executable, "-m", "tests.fault.diskfull", str(tmp / "mnt"), str(out),
                        *sizes, "64m"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or not out.exists():
        row("full disk (tmpfs)", 0, f"skipped: {p.stderr.strip()[-200:]}", 0, 0)
        return
    res = json.loads(out.read_text())
    runs = res["runs"]
    full = [r for r in runs[:-1]]
    clear = sum(r["rc"] != 0 and r["enospc"] for r in full)
    half = sum(len(r["problems"]) for r in runs)
    snap = res["snapshot"]
    d = ["final run failed"]
    lost = dups = 0
    if snap:
        snap["sft"] = {int(k): v for k, v in snap["sft"].items()}
        snap["catalog"] = [tuple(r) for r in snap["catalog"]]
        d = compare(clean, snap)
        lost, dups = lost_and_duplicated(clean, snap)
    row("full disk (tmpfs, then grown)", len(full), f"{clear}/{len(full)} clear ENOSPC failures; "
        f"resume {'= clean run' if not d else 'DIFFERS'}", lost, dups,
        note=f"failed in stages {[r['stage'] for r in full]}; half-written final files: {half}")


def write_table(path: Path, seconds: float) -> str:
    head = ("| part | faults injected | runs survived | data lost | duplicates | attacks tried / contained | "
            "fuzz inputs | notes |\n|---|---|---|---|---|---|---|---|\n")
    body = "".join(f"| {r['part']} | {r['faults']} | {r['survived']} | {r['lost']} | {r['dups']} | {r['attacks']} | "
                   f"{r['fuzz']} | {r['note'].replace('|', '/')} |\n" for r in ROWS)
    text = (f"# Reliability and security figures\n\nMeasured by `benchmarks/bench_faults.py` on "
            f"{time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, {seconds / 60:.0f} min).\n\n" + head + body)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=21)
    ap.add_argument("--concurrent", type=int, default=2)
    ap.add_argument("--llm-per-kind", type=int, default=3)
    ap.add_argument("--fuzz", type=int, default=400, help="examples per fuzz property")
    ap.add_argument("--disk-sizes", default="48k,96k,160k,240k")
    ap.add_argument("--skip", default="", help="comma list of: crash,concurrent,llm,hostile,fuzz,disk")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "faults.md"))
    a = ap.parse_args()
    skip = set(a.skip.split(",")) - {""}
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    try:
        clean_ws, clean, code = bench_crash(tmp, a.kills if "crash" not in skip else 0, a.seed)

        def fresh() -> tuple[Path, dict[str, Any]]:
            nonlocal clean_ws, clean, code
            if source_hash() != code:  # the code changed since the clean run: compare with the new code's
                clean_ws, clean, _, _, code = make_clean(tmp, 100 + len(ROWS))
            return clean_ws, clean

        if "concurrent" not in skip:
            fresh()
            bench_concurrent(tmp, clean_ws, clean, a.concurrent)
        if "llm" not in skip:
            bench_llm(tmp, clean_ws, a.llm_per_kind)
        if "hostile" not in skip:
            bench_hostile(tmp)
        if "fuzz" not in skip:
            bench_fuzz(a.fuzz)
        if "disk" not in skip:
            fresh()
            bench_disk(tmp, clean, a.disk_sizes.split(","))
    finally:
        print(write_table(Path(a.out), time.time() - t0))
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
