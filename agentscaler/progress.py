"""Progress of long stages: stages say how far they are, the command line shows it (issue 17).

A stage opens `stage(name, total, unit)` and calls `advance()` as items finish, from any thread;
a `total` of None means "unknown". Where that goes is set once per process by the command line
with `show(...)`:
- on a terminal, a live rich display: one row per open stage with done/total, rate and time left;
- otherwise (a log file, CI), plain lines on stderr: at most one line per open stage every
  `every` seconds (AGENTSCALER_PROGRESS_EVERY, default 5), a heartbeat line at least every 30 s
  while a stage is open, and a closing line for a stage that ran that long;
- with `quiet`, or when nothing is installed (library use, tests, Prefect workers), nothing.
Everything goes to stderr, so `--json` output on stdout stays clean.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

EVERY_S = float(os.environ.get("AGENTSCALER_PROGRESS_EVERY", "5"))  # plain lines: at most one per stage this often
HEARTBEAT_S = 30.0  # ... and one at least this often while a stage is open, moving or not


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Stage:
    """One stage's count; `advance` is safe from any thread."""

    def __init__(self, name: str, total: int | None, unit: str, sink: Any) -> None:
        self.name, self.total, self.unit = name, total, unit
        self.done = 0
        self.note = ""
        self.started = time.monotonic()
        self._sink = sink
        self._lock = threading.Lock()

    def advance(self, n: int = 1, note: str | None = None) -> None:
        with self._lock:
            self.done += n
            if note is not None:
                self.note = note
        if self._sink is not None:
            self._sink.update(self)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def rate(self) -> float | None:
        """Items per second so far (None before the first)."""
        e = self.elapsed()
        return self.done / e if self.done and e > 0 else None

    def left_s(self) -> float | None:
        """Seconds left at the rate so far (None when the total or the rate is unknown)."""
        r = self.rate()
        if self.total is None or not r:
            return None
        return max(0.0, (self.total - self.done) / r)

    def line(self, finished: bool = False) -> str:
        """`build: 120/1154 domains (10%), 1.3 domains/s, about 13 min left` (or `... done in 15 min`)."""
        of = f"/{self.total}" if self.total is not None else ""
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        r = self.rate()
        rate = (f", {r:.2f} {self.unit}/s" if r < 10 else f", {r:.0f} {self.unit}/s") if r else ""
        if finished:
            tail = f", done in {_duration(self.elapsed())}"
        else:
            left = self.left_s()
            tail = f", about {_duration(left)} left" if left is not None else f", {_duration(self.elapsed())} so far"
        note = f" [{self.note}]" if self.note else ""
        return f"{self.name}: {self.done}{of} {self.unit}{pct}{rate}{tail}{note}"


class _Lines:
    """Plain lines for a log, written by one ticker thread: every `every` seconds, a line for each
    open stage that moved since its last line (or has been silent for HEARTBEAT_S: still alive),
    and a closing line for a stage that ran at least `every` seconds or was shown before."""

    def __init__(self, stream: IO[str], every: float) -> None:
        self.stream, self.every = stream, every
        self.open: dict[int, Stage] = {}
        self.shown: dict[int, tuple[int, float]] = {}  # stage -> (done, time) at its last line
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
        self.ticker.start()

    def _print(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def _tick(self) -> None:
        while not self.stopped.wait(self.every):
            now = time.monotonic()
            with self.lock:
                for key, st in list(self.open.items()):
                    done, at = self.shown.get(key, (0, st.started))
                    if st.done != done or now - at >= HEARTBEAT_S:
                        self.shown[key] = (st.done, now)
                        self._print(st.line())

    def start(self, st: Stage) -> None:
        with self.lock:
            self.open[id(st)] = st

    def update(self, st: Stage) -> None:
        pass  # the ticker reads the counts

    def finish(self, st: Stage) -> None:
        with self.lock:
            self.open.pop(id(st), None)
            shown = self.shown.pop(id(st), None)
            if shown is not None or st.elapsed() >= self.every:
                self._print(st.line(finished=True))

    def stop(self) -> None:
        self.stopped.set()
        self.ticker.join()


class _Live:
    """A rich live display on a terminal: one row per stage."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                                 TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[rate]}"),
                                 TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                                 TextColumn("{task.fields[note]}"), console=console, transient=False)
        self.ids: dict[int, Any] = {}
        self.lock = threading.Lock()
        self.started = False  # the display starts with the first stage: a quick command draws nothing

    def start(self, st: Stage) -> None:
        with self.lock:
            if not self.started:
                self.progress.start()
                self.started = True
            self.ids[id(st)] = self.progress.add_task(st.name, total=st.total, unit=st.unit, rate="", note="")

    def update(self, st: Stage) -> None:
        r = st.rate()
        with self.lock:
            if id(st) in self.ids:
                self.progress.update(self.ids[id(st)], completed=st.done, total=st.total, note=st.note,
                                     rate=f"{r:.2f}/s" if r else "")

    def finish(self, st: Stage) -> None:
        self.update(st)
        with self.lock:
            task = self.ids.pop(id(st), None)
            if task is None:
                return
            if self.ids or st.elapsed() < 1.0:  # an inner stage (its parent still counts) or a blink: off screen
                self.progress.remove_task(task)
            else:
                self.progress.stop_task(task)

    def stop(self) -> None:
        if self.started:
            self.progress.stop()


_SINK: Any = None


@contextmanager
def show(quiet: bool = False, stream: IO[str] | None = None, every: float | None = None,
         live: bool | None = None) -> Iterator[None]:
    """Install where progress goes for the block: a live display on a terminal, plain lines
    otherwise, nothing when quiet. `live` forces one or the other (tests)."""
    global _SINK
    stream = stream or sys.stderr
    if quiet:
        sink = None
    elif live if live is not None else stream.isatty():
        sink = _Live(Console(file=stream))
    else:
        sink = _Lines(stream, EVERY_S if every is None else every)
    old, _SINK = _SINK, sink
    try:
        yield
    finally:
        _SINK = old
        if sink is not None:
            sink.stop()


@contextmanager
def stage(name: str, total: int | None = None, unit: str = "items") -> Iterator[Stage]:
    """Report a stage's progress while the block runs (a no-op when nothing is shown)."""
    sink = _SINK
    st = Stage(name, total, unit, sink)
    if sink is not None:
        sink.start(st)
    try:
        yield st
    finally:
        if sink is not None:
            sink.finish(st)
