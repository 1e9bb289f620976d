"""Reliability and security figures (issue 11): crashes, concurrent runs, LLM faults, hostile code,
hostile corpora, a full disk. Prints the table and writes benchmarks/results/faults.{md,json}.

    .venv/bin/python benchmarks/bench_faults.py [--quick] [--kills 21] [--fuzz 400] [--skip disk,concurrent,...]

Hostile code is counted as DISTINCT attacks (tests/envs/test_sandbox_attacks.py's ATTACKS), each by the
layer that stopped it, read from the run itself: on the LLM-synthesizer path, the static check before
anything runs or the sandboxed validation's error; on the Environment path (hand-written tools.py,
which the static check never sees), the error each attack's call returned, mapped to its layer
(RUNTIME_LAYERS). An attack tried on both paths is one attack, not two.

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
import re
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

from benchmarks.results_io import Figure, Recorder  # noqa: E402
from tests.fault.crash import STAGES, child, clean_run, crash_chain, finish, source_hash  # noqa: E402
from tests.fault.faulty_llm import FaultyLLM  # noqa: E402
from tests.fault.pipeline import compare, lost_and_duplicated, snapshot  # noqa: E402

ROWS: list[dict[str, Any]] = []
ATTACK_ROWS: list[dict[str, Any]] = []  # one per distinct attack: the layer that stopped it on each path

# The error text a contained attack's call returns -> the layer that stopped it (first match wins; the
# messages are envs/worker.py's, envs/sandbox.py's, the OS's under seccomp/bwrap, and SQLite's authorizer).
RUNTIME_LAYERS = [
    ("socket syscall refused", "seccomp (syscall denied)"),
    ("os.system failed", "seccomp (fork/exec denied)"),
    ("not permitted", "seccomp (syscall denied)"),
    ("No such file", "mount namespace (host paths absent)"),
    ("Read-only file system", "mount namespace (read-only mount)"),
    ("out of memory", "resource limits (RLIMIT_AS)"),
    ("time limit", "resource limits (wall-clock deadline)"),
    ("too large", "reply size caps"),
    ("not authorized", "SQLite authorizer (guarded DB)"),
    ("not JSON", "result check (JSON only)"),
    ("nested deeper", "result depth bound"),
    ("JSON", "result depth bound"),
    ("recursion", "recursion limit in the worker"),
    ("SystemExit", "worker catches exit"),
    ("protocol", "reply nonce and framing (worker stopped)"),
    ("crashed", "process isolation (crashed child replaced)"),
]


def layer_of(error: str) -> str:
    for fragment, layer in RUNTIME_LAYERS:
        if fragment in error:
            return layer
    return f"other: {error[:60]}" if error else "none (the call succeeded)"


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
        ok = intact and ((res["failed"] and res["catalog"] == "failed") or res["layer"] == "none")
        contained += ok
        # past the static check, the sandboxed validation runs the code: the layer is named by its error
        runtime = layer_of(res["error"])
        first = {"static": "static check (before anything runs)", "none": "none: accepted, harmless in the sandbox"}.get(
            res["layer"]) or (runtime if not runtime.startswith("other") else "sandboxed validation (no layer named in "
                                                                              "the error)")
        ATTACK_ROWS.append({"attack": attack, "llm_path": first, "llm_contained": ok, "env_path": "not tried",
                            "env_contained": None})
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
        by_attack = {r["attack"]: r for r in ATTACK_ROWS}
        for attack, fragment, _ in CASES:
            res = env.call(f"attack_{attack}", {})
            after = env.call("get_user", {"user_id": "u1"})
            ok = (not res.ok and any(f in (res.error or "") for f in fragment.split("|"))
                  and after.ok and after.content["name"] == "Ada")
            env_ok += ok
            r = by_attack.setdefault(attack, {"attack": attack, "llm_path": "not tried", "llm_contained": None})
            r.update(env_path=layer_of("" if res.ok else (res.error or "")), env_contained=ok)
    finally:
        env.close()
    distinct = len(ATTACK_ROWS)
    held = sum(all(r[k] is not False for k in ("llm_contained", "env_contained")) for r in ATTACK_ROWS)
    row("hostile code (distinct attacks; LLM synth and Environment paths)", distinct,
        f"{held}/{distinct} contained on every path tried", 0, 0, attacks=f"{distinct} distinct, {held} contained",
        note=f"LLM synth path: {len(ATTACKS)} tried, {contained} contained ({dict(layers)}); Environment on an LLM "
             f"domain (no static check): {len(CASES)} tried, {env_ok} contained; deliveries are not added up")


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


def write_table() -> str:
    head = ("| part | faults injected | runs survived | data lost | duplicates | attacks tried / contained | "
            "fuzz inputs | notes |\n|---|---|---|---|---|---|---|---|\n")
    body = "".join(f"| {r['part']} | {r['faults']} | {r['survived']} | {r['lost']} | {r['dups']} | {r['attacks']} | "
                   f"{r['fuzz']} | {r['note'].replace('|', '/')} |\n" for r in ROWS)
    return head + body + attacks_table()


def attacks_table() -> str:
    """Distinct attacks by the layer that stopped each: first on the LLM path, then with no static check."""
    if not ATTACK_ROWS:
        return ""
    first = Counter(r["llm_path"] for r in ATTACK_ROWS if r["llm_path"] != "not tried")
    env = Counter(r["env_path"] for r in ATTACK_ROWS if r["env_path"] != "not tried")
    out = [f"\n## Hostile code: {len(ATTACK_ROWS)} distinct attacks, by the layer that stopped each\n",
           "On the LLM path, code past the static check runs in the sandboxed validation; the layer named is the "
           "one its error names. The two columns are the same attacks delivered two ways: never add them up.\n",
           "| layer | LLM-written code (static check first) | hand-written tools.py (no static check) |", "|---|---|---|"]
    for layer in sorted(set(first) | set(env)):
        out.append(f"| {layer} | {first.get(layer, 0)} | {env.get(layer, 0)} |")
    out.append(f"| total tried | {sum(first.values())} | {sum(env.values())} |")
    out += ["", "| attack | LLM path: stopped by | contained | Environment path: stopped by | contained |",
            "|---|---|---|---|---|"]
    out += [f"| {r['attack']} | {r['llm_path']} | {r['llm_contained']} | {r['env_path']} | {r['env_contained']} |"
            for r in ATTACK_ROWS]
    return "\n".join(out) + "\n"


def record(rec: Recorder, quick: bool) -> None:
    """The figures: each part's survival as a count of its total, and distinct attacks per stopping layer."""
    tag = " (quick: fewer faults)" if quick else ""
    for r in ROWS:
        m = re.match(r"^(\d+)/(\d+)", r["survived"])
        if not m:
            rec.notes.append(f"{r['part']}: {r['survived']}")
            continue
        n, of = int(m.group(1)), int(m.group(2))
        rec.figures.append(Figure(name=f"{r['part']}: survived", value=n, unit=f"of {of}",
                                  workload=f"fixture: the plain pipeline on fixture corpora; {r['faults']} faults{tag}",
                                  aim="all, 0 lost, 0 duplicated", meets_aim=n == of and r["lost"] == 0 and r["dups"] == 0))
    for key, path in (("llm_path", "LLM-written code, static check first"),
                      ("env_path", "the same attacks in hand-written tools.py, no static check")):
        by = Counter(r[key] for r in ATTACK_ROWS if r[key] != "not tried")
        for layer, n in sorted(by.items()):
            rec.figures.append(Figure(name=f"distinct attacks, stopping layer: {layer} ({path})", value=n,
                                      unit=f"of {sum(by.values())} attacks",
                                      workload="fixture: tests/envs/test_sandbox_attacks.py's attacks; the two paths "
                                               "are the same attacks, never added up"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="bounded: 2 kills, 1 concurrent pair, 1 LLM fault per kind, 25 fuzz examples, 1 disk size")
    ap.add_argument("--kills", type=int, default=None, help="default 21 (quick 2)")
    ap.add_argument("--concurrent", type=int, default=None, help="default 2 (quick 1)")
    ap.add_argument("--llm-per-kind", type=int, default=None, help="default 3 (quick 1)")
    ap.add_argument("--fuzz", type=int, default=None, help="examples per fuzz property (default 400, quick 25)")
    ap.add_argument("--disk-sizes", default=None, help="default 48k,96k,160k,240k (quick 96k)")
    ap.add_argument("--skip", default="", help="comma list of: crash,concurrent,llm,hostile,fuzz,disk")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    q = a.quick
    a.kills = a.kills if a.kills is not None else (2 if q else 21)
    a.concurrent = a.concurrent or (1 if q else 2)
    a.llm_per_kind = a.llm_per_kind or (1 if q else 3)
    a.fuzz = a.fuzz or (25 if q else 400)
    a.disk_sizes = a.disk_sizes or ("96k" if q else "48k,96k,160k,240k")
    skip = set(a.skip.split(",")) - {""}
    tmp = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    try:
        with Recorder("faults") as rec:
            run_parts(a, skip, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record(rec, q)
    rec.layers = ["sandbox: bwrap + seccomp + rlimits + Landlock where the kernel has it",
                  "static check of LLM-written code", "fresh sandbox child per episode"]
    print(write_table())
    print(rec.write(write_table()))


def run_parts(a: argparse.Namespace, skip: set[str], tmp: Path) -> None:
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


if __name__ == "__main__":
    main()
