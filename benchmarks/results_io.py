"""One shape for every benchmark's results, so `make bench` can rebuild the README figures table.

Each benchmark script writes benchmarks/results/<name>.json (this model) and <name>.md (for people).
A figure's anchor (a peer's or the paper's figure it is compared with) is either measured in the same
run, side by side, or quoted with its source; the two kinds never share a column. A figure measured
on a workload that flatters (copies of one item, warm caches, a toy fixture) says so in `workload`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[1]
# AGENTSCALER_BENCH_RESULTS: write elsewhere (the tests do, so a test run never replaces measured results)
RESULTS = Path(os.environ.get("AGENTSCALER_BENCH_RESULTS") or ROOT / "benchmarks" / "results")


class Anchor(BaseModel):
    """The figure a result is compared with: measured beside it in the same run, or quoted."""

    model_config = ConfigDict(extra="forbid")
    value: float
    unit: str
    kind: Literal["measured", "quoted"]
    source: str  # measured: what ran (e.g. "tau2 in-process call, same run"); quoted: where it is written


class Figure(BaseModel):
    """One row of the README figures table."""

    model_config = ConfigDict(extra="forbid")
    name: str  # what is measured, e.g. "replay verification throughput"
    value: float  # the headline (usually the median)
    unit: str
    workload: str  # what it ran on: "real: demo workspace, 160 domains" or "fixture: 250 copies of shop"
    median: float | None = None
    p99: float | None = None
    ratio_to_anchor: float | None = None
    anchor: Anchor | None = None
    aim: str | None = None  # the aim, e.g. ">= 2,000/s (issue 24)"
    meets_aim: bool | None = None


class Results(BaseModel):
    model_config = ConfigDict(extra="forbid")
    benchmark: str
    commit: str
    started: str
    seconds: float
    machine: dict[str, object]
    load_start: list[float]
    load_end: list[float]
    layers: list[str] = Field(default_factory=list)  # isolation/verification layers active while measuring
    figures: list[Figure]
    notes: list[str] = Field(default_factory=list)


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of the samples; with fewer than 100 samples, p99 is the largest."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def p99(xs: list[float]) -> float:
    return percentile(xs, 0.99)


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        # results files written by an earlier benchmark of the same `make bench` do not make the code dirty
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!benchmarks/results"], capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def short_sha(ref: str) -> str:
    """git `ref` of this repository as its short hash (a --before arm's label)."""
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


def export_tree(ref: str, into: Path) -> Path:
    """The files of git `ref` of this repository under `into`: a --before arm's code, run side by
    side with this tree's on the same workload."""
    into.mkdir(parents=True, exist_ok=True)
    data = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=data, check=True)
    return into


def tree_cpu_s(pids: list[int], own_only: bool = False) -> float:
    """CPU seconds used so far by these processes and every process under them, from /proc: each
    live thread's from the scheduler (schedstat, ns), the process's threads that have ended from
    its stat (utime + stime, clock ticks, less its live threads' own), the reaped children's
    through their parent (cutime + cstime); own_only: the processes' own time.

    Why schedstat: stat's times are clock-tick samples, which a tickless kernel does not take on an
    idle CPU. A process that wakes for a millisecond at a time (a sandbox child serving round trips)
    is then mostly not seen: on the real workspace's replay stat gave 19-148 us of sandbox CPU per
    trajectory where schedstat and perf gave 140-260. Ended threads (a verifier's thread pools)
    have no schedstat left, so their ticks are counted."""
    kids: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append(int(p))
        stats[int(p)] = fields
    ticks, ns, stack = 0, 0, list(pids)
    while stack:
        pid = stack.pop()
        fields = stats.get(pid)
        if fields is None:
            continue
        try:
            live_ticks = 0
            for t in os.listdir(f"/proc/{pid}/task"):
                ns += int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
                ts = Path(f"/proc/{pid}/task/{t}/stat").read_text()
                tf = ts[ts.rindex(")") + 2:].split()
                live_ticks += int(tf[11]) + int(tf[12])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        ticks += max(0, int(fields[11]) + int(fields[12]) - live_ticks)  # its ended threads
        if not own_only:
            ticks += int(fields[13]) + int(fields[14])  # its reaped children
            stack.extend(kids.get(pid, []))
    return ns / 1e9 + ticks / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, object]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


class Recorder:
    """Times a benchmark and records the load before and after: `with Recorder("verify") as r: ...`."""

    def __init__(self, benchmark: str):
        self.benchmark = benchmark
        self.figures: list[Figure] = []
        self.layers: list[str] = []
        self.notes: list[str] = []

    def __enter__(self) -> "Recorder":
        self.t0 = time.time()
        self.load_start = [round(x, 2) for x in os.getloadavg()]
        return self

    def __exit__(self, *exc: object) -> None:
        self.load_end = [round(x, 2) for x in os.getloadavg()]
        self.seconds = round(time.time() - self.t0, 2)

    def results(self) -> Results:
        return Results(benchmark=self.benchmark, commit=commit(),
                       started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.t0)),
                       seconds=getattr(self, "seconds", round(time.time() - self.t0, 2)), machine=machine(),
                       load_start=self.load_start, load_end=getattr(self, "load_end", None) or [round(x, 2) for x in os.getloadavg()],
                       layers=self.layers, figures=self.figures, notes=self.notes)

    def write(self, markdown: str, out_dir: Path = RESULTS) -> Path:
        """Writes <name>.json and <name>.md (the markdown gets the common header: commit, load, layers)."""
        res = self.results()
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{self.benchmark}.json").write_text(json.dumps(res.model_dump(), indent=2) + "\n")
        header = (f"# {self.benchmark}\n\ncommit {res.commit}, {res.started}, {res.seconds} s, "
                  f"{res.machine['cpus']} CPUs, load {res.load_start} -> {res.load_end}"
                  + (f"; layers active: {', '.join(res.layers)}" if res.layers else "") + "\n\n")
        path = out_dir / f"{self.benchmark}.md"
        path.write_text(header + markdown.rstrip() + "\n")
        return path


def load_results(out_dir: Path = RESULTS) -> list[Results]:
    """Every results file that has the common shape (older free-form JSON files are skipped)."""
    found = []
    for p in sorted(out_dir.glob("*.json")):
        try:
            found.append(Results.model_validate_json(p.read_text()))
        except ValueError:
            continue
    return found
