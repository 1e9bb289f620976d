"""Crash and resume, and two runs at once, on the real plain stages (real SQLite, real sandbox).

The pipeline runs in a child process (tests/fault/pipeline.py) on the fixture corpora; rollouts
use the scripted user and the oracle agent of tests/fault/faulty_llm.py (a scripted endpoint:
these tests are about our own resume and locking logic, not a model). The 20+ kill loop is
benchmarks/bench_faults.py; here a few kills aimed at random stages.
"""

from __future__ import annotations

import random
import shutil
import time

from tests.fault.crash import STAGES, child, crash_chain, finish, stage_lines
from tests.fault.faulty_llm import FaultyLLM
from tests.fault.pipeline import compare, lost_and_duplicated, snapshot


def test_clean_run_is_complete(clean_pipeline):
    ws, snap, _ = clean_pipeline
    assert snap["problems"] == []
    assert len(snap["domains"]) >= 2 and sum(len(v["ids"]) for v in snap["scenarios"].values()) >= 3
    assert snap["trajectories"] and snap["passed"] and snap["sft"][1]  # the oracle agent passes; rows exported
    assert not snap.get("unfinished")


def test_sigkill_at_random_stages_then_resume_equals_clean_run(clean_pipeline, tmp_path):
    _, clean, stage_s = clean_pipeline
    seed = int(time.time())
    rng = random.Random(seed)
    targets = sorted(rng.sample([s for s in STAGES if s != "ingest"], 3), key=STAGES.index)
    ws = tmp_path / "ws"
    with FaultyLLM(ws) as srv:
        events = crash_chain(ws, srv.url, targets, stage_s, rng)
    assert sum(e["killed"] for e in events) >= 1, (seed, events)  # a kill aimed at a short stage may come late
    got = snapshot(ws)
    assert compare(clean, got) == [], (seed, events, compare(clean, got))
    assert lost_and_duplicated(clean, got) == (0, 0)
    assert not got.get("unfinished")


def test_two_runs_at_once_build_each_domain_once(clean_pipeline, tmp_path):
    src, clean, _ = clean_pipeline
    ws = tmp_path / "ws"
    # both start from the clean run's corpus and domains (discover skips), so they reach synthesis together
    for sub in ("corpus", "graph"):
        shutil.copytree(src / sub, ws / sub)
    builds = tmp_path / "builds.log"
    with FaultyLLM(ws) as srv:
        procs = [child(ws, srv.url, tmp_path / f"run{i}.stages", until="scenarios", count_builds=builds)
                 for i in range(2)]
        for p in procs:
            finish(p)
    lines = [ln.split() for ln in builds.read_text().splitlines()]
    synth = [d for kind, d, _ in lines if kind == "synthesize"]
    scen = [d for kind, d, _ in lines if kind == "scenarios"]
    assert sorted(synth) == sorted(set(synth)) == sorted(clean["domains"]), lines  # each built once
    assert sorted(scen) == sorted(set(scen)) == sorted(clean["scenarios"]), lines
    spans = [dict(stage_lines(tmp_path / f"run{i}.stages")) for i in range(2)]
    assert max(s["synthesize"] for s in spans) < min(s["finished"] for s in spans), spans  # they did overlap
    got = snapshot(ws)
    assert got["problems"] == []
    assert got["domains"] == clean["domains"] and got["scenarios"] == clean["scenarios"]
    assert got["catalog"] == clean["catalog"]  # one row per (domain, stage), all done, same artifacts
