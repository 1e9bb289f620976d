"""Helpers for the orphan tests (issue 22, class 11): the processes below a pid, and waiting for them to go."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), fields[0]


def descendants(root: int) -> set[int]:
    """Every process below root (children, grandchildren...), from /proc."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := _stat(int(d))) is not None:
            parents[int(d)] = st[0]
    out: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier and p not in out}
        out |= frontier
    return out


def alive(pids: set[int]) -> set[int]:
    """The pids still running (a zombie waiting for its reaper counts as gone)."""
    return {p for p in pids if (st := _stat(p)) is not None and st[1] != "Z"}


def wait_gone(pids: set[int], timeout_s: float = 15.0) -> set[int]:
    """Wait for pids to end; returns the ones still alive, after killing them (this test started them)."""
    deadline = time.monotonic() + timeout_s
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
