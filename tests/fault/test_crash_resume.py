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

from tests.fault.crash import STAGES, child, crash_chain, finish
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
    rng = random.Random(int(time.time()))
    targets = sorted(rng.sample([s for s in STAGES if s != "ingest"], 3), key=STAGES.index)
    ws = tmp_path / "ws"
    with FaultyLLM(ws) as srv:
        events = crash_chain(ws, srv.url, targets, stage_s, rng)
    assert sum(e["killed"] for e in events) >= 2, events  # at least two kills landed mid-run
    got = snapshot(ws)
    assert compare(clean, got) == [], (events, compare(clean, got))
    assert lost_and_duplicated(clean, got) == (0, 0)
    assert not got.get("unfinished")


def test_two_runs_at_once_build_each_domain_once(clean_pipeline, tmp_path):
    _, clean, _ = clean_pipeline
    ws = tmp_path / "ws"
    # both start from an ingested, discovered workspace, so they reach synthesis together
    with FaultyLLM(ws) as srv:
        finish(child(ws, srv.url, tmp_path / "prep.stages", until="discover"))
        builds = tmp_path / "builds.log"
        procs = [child(ws, srv.url, tmp_path / f"run{i}.stages", until="scenarios", count_builds=builds)
                 for i in range(2)]
        for p in procs:
            finish(p)
    lines = [ln.split() for ln in builds.read_text().splitlines()]
    synth = [d for kind, d, _ in lines if kind == "synthesize"]
    scen = [d for kind, d, _ in lines if kind == "scenarios"]
    assert sorted(synth) == sorted(set(synth)) == sorted(clean["domains"]), lines
    assert sorted(scen) == sorted(set(scen)) == sorted(clean["scenarios"]), lines
    got = snapshot(ws)
    assert got["problems"] == []
    assert got["domains"] == clean["domains"] and got["scenarios"] == clean["scenarios"]
    assert got["catalog"] == [r for r in clean["catalog"] if r[1] in ("synthesize", "scenarios")] or \
        {(d, s, st) for d, s, st, _ in got["catalog"]} <= {(d, s, st) for d, s, st, _ in clean["catalog"]}
