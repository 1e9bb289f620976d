"""The append-only trajectories file of one run: durable lines, one writer at a time, resumable.

Trajectories are appended to `rollouts/<run-id>/trajectories.jsonl` as each finishes (write,
flush, fsync under an exclusive run lock), so a crash loses at most the conversations in
flight; a torn last line is cut off on the next start; a resumed run skips ids already in the
file (trajectory ids are content hashes of run id, scenario id and trial).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path
from typing import Any

from agentscaler.artifacts import TRAJECTORIES
from agentscaler.models import Trajectory
from agentscaler.workspace import read_jsonl


class TrajectoryWriter:
    """Append-only trajectories file of one run, held under an exclusive lock while open."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / TRAJECTORIES
        self._lock_fh = open(self.run_dir / "run.lock", "a+")
        try:
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise RuntimeError(f"run {self.run_dir.name} is being written by another process ({self.run_dir}/run.lock)")
        self._repair_tail()
        self.ids = {r.get("id") for r in read_jsonl(self.path)} if self.path.exists() else set()
        self._fh = open(self.path, "a", encoding="utf-8")
        self._pending: list[tuple[str, str, Any]] = []
        self._flushing = False

    def _repair_tail(self) -> None:
        """Cut a torn last line (crash mid-append) so the next append starts on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if data.endswith(b"\n"):
                return
            fh.truncate(data.rfind(b"\n") + 1)
            fh.flush()
            os.fsync(fh.fileno())

    def append_sync(self, traj: Trajectory) -> None:
        self._append_lines([(traj.model_dump_json() + "\n", traj.id)])

    async def append(self, traj: Trajectory, executor: Any = None) -> None:
        """Append and fsync; returns once the line is durable. Lines finishing together share one
        fsync (group commit), so the disk does not serialize the conversations."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((traj.model_dump_json() + "\n", traj.id, fut))
        if not self._flushing:
            self._flushing = True
            try:
                while self._pending:
                    batch, self._pending = self._pending, []
                    try:
                        await asyncio.get_running_loop().run_in_executor(
                            executor, self._append_lines, [(line, tid) for line, tid, _ in batch])
                    except BaseException as exc:  # noqa: BLE001 - every waiter of the batch learns it
                        for _, _, f in batch:
                            if not f.done():
                                f.set_exception(exc)
                        continue
                    for _, _, f in batch:
                        if not f.done():
                            f.set_result(None)
            finally:
                self._flushing = False
        await fut

    def _append_lines(self, lines: list[tuple[str, str]]) -> None:
        self._fh.write("".join(line for line, _ in lines))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.ids.update(tid for _, tid in lines)

    def close(self) -> None:
        self._fh.close()
        self._lock_fh.close()
