"""Kill the pipeline child with SIGKILL at random points of chosen stages, resume, compare with a clean run.

Shared by tests/fault/test_crash_resume.py (a few kills) and benchmarks/bench_faults.py (20+).
A kill is aimed at a stage: the child logs each stage's start; the killer waits for that line,
then sleeps a random part of the stage's duration in the clean run and sends SIGKILL.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.fault.pipeline import ROOT, STAGES

CHILD_TIMEOUT = 600


def source_hash() -> str:
    """Hash of the pipeline's source (other engineers edit the tree while a long benchmark runs:
    a clean run only compares with runs of the same code)."""
    import hashlib

    h = hashlib.sha256()
    for pkg in ("agentscaler", "envs", "tasks", "training"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            h.update(str(f.relative_to(ROOT)).encode() + f.read_bytes())
    return h.hexdigest()[:16]


def child(ws: Path, url: str, stage_log: Path, until: str = "export", count_builds: Path | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.fault.pipeline", str(ws), url, "--stage-log", str(stage_log), "--until", until]
    if count_builds:
        cmd += ["--count-builds", str(count_builds)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen, timeout: float = CHILD_TIMEOUT) -> str:
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"pipeline child failed ({p.returncode}):\n{err[-4000:]}")
    return out


def stage_lines(stage_log: Path) -> list[tuple[str, float]]:
    if not stage_log.exists():
        return []
    out = []
    for line in stage_log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], float(parts[1])))
    return out


def durations(stage_log: Path) -> dict[str, float]:
    """Seconds each stage took in a finished run's log."""
    lines = stage_lines(stage_log)
    return {a: b_t - a_t for (a, a_t), (_, b_t) in zip(lines, lines[1:])}


def clean_run(ws: Path, url: str, log: Path) -> dict[str, float]:
    finish(child(ws, url, log))
    return durations(log)


def kill_during(ws: Path, url: str, log: Path, stage: str, stage_s: dict[str, float], rng: random.Random) -> dict[str, Any]:
    """Start a (resuming) child, SIGKILL it at a random moment of `stage`; returns what happened."""
    n0 = len(stage_lines(log))
    p = child(ws, url, log)
    t_end = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < t_end and p.poll() is None:
        if any(s == stage for s, _ in stage_lines(log)[n0:]):
            break
        time.sleep(0.02)
    delay = rng.uniform(0, max(0.05, stage_s.get(stage, 1.0)))
    time.sleep(delay)
    lines = stage_lines(log)[n0:]
    where = lines[-1][0] if lines else "startup"
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()
        killed = where != "finished"  # a kill after the last stage (the child was exiting) is not a mid-run kill
    else:
        killed = False
    p.communicate()
    return {"target": stage, "hit": where, "delay_s": round(delay, 3), "killed": killed}


def crash_chain(ws: Path, url: str, targets: list[str], stage_s: dict[str, float], rng: random.Random) -> list[dict[str, Any]]:
    """Kill one workspace's pipeline at each target in turn (each start resumes the last), then finish it."""
    log = ws.parent / f"{ws.name}.stages"
    events = [kill_during(ws, url, log, t, stage_s, rng) for t in targets]
    finish(child(ws, url, log))
    return events


__all__ = ["STAGES", "source_hash", "child", "clean_run", "crash_chain", "durations", "finish", "kill_during", "stage_lines"]
