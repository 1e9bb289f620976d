"""The workspace folder a run leaves on disk, and atomic writes into it.

Every artifact is written to a temporary name in the same folder, fsynced, and renamed into
place, so a crash never leaves a half-written file under its final name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson


def atomic_write_bytes(path: Path, data: bytes | Iterable[bytes | memoryview]) -> Path:
    """data: the bytes, or chunks written one after another (no joined copy of a large file)."""
    return atomic_write_start(path, data).finish()


class StagedWrite:
    """atomic_write_bytes in two steps: the bytes are in a temporary file beside `path`
    (atomic_write_start); finish() makes them durable (fsync, the part that waits on the disk)
    and puts the file in place. A caller can do other work between, or finish in another thread:
    the fsync of a large file needs no interpreter lock, where its write, while another thread
    computes, would wait for the lock after each of its system calls."""

    def __init__(self, path: Path, fd: int, tmp: str):
        self.path, self.fd, self.tmp = path, fd, tmp

    def finish(self) -> Path:
        try:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abandon()
            raise
        return self.path

    def abandon(self) -> None:
        """Drop the temporary file (the destination is left as it was)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        Path(self.tmp).unlink(missing_ok=True)


def atomic_write_start(path: Path, data: bytes | Iterable[bytes | memoryview]) -> StagedWrite:
    """atomic_write_bytes' first step (see StagedWrite): the data written to a temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    staged = StagedWrite(path, fd, tmp)
    try:
        write_chunks(fd, [data] if isinstance(data, (bytes, bytearray, memoryview)) else data)
    except BaseException:
        staged.abandon()
        raise
    return staged


IOV_MAX = 1024  # chunks per writev (Linux's limit)


def write_chunks(fd: int, chunks: Iterable[bytes | memoryview]) -> None:
    """Write the chunks one after another with writev, IOV_MAX at a time: a handful of system
    calls for a file of thousands of slices (a verified run's rewrite: half the time and a third of
    the CPU of a buffered writelines, which makes a call or two per chunk)."""
    batch: list[bytes | memoryview] = []
    for c in chunks:
        batch.append(c)
        if len(batch) == IOV_MAX:
            _writev_all(fd, batch)
            batch = []
    _writev_all(fd, batch)


def _writev_all(fd: int, batch: list[bytes | memoryview]) -> None:
    at = 0
    while at < len(batch):
        n = os.writev(fd, batch[at:at + IOV_MAX])
        while at < len(batch) and n >= len(batch[at]):  # what was written whole (a short write is rare)
            n -= len(batch[at])
            at += 1
        if n:
            batch[at] = memoryview(batch[at])[n:]


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


# Indented, sorted, UTF-8, a newline at the end, like json.dumps(indent=2, sort_keys=True,
# ensure_ascii=False, default=str); datetimes and dataclasses go to `default` as json sends them.
JSON_OPTIONS = (orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
                | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_APPEND_NEWLINE)


def json_bytes(obj: Any) -> bytes:
    """An artifact's JSON. orjson, because json's indenting encoder is pure Python: 20-40 s for the
    domains and report files of a 30k-tool corpus (issue 20 aim 6); what orjson refuses (an int over
    64 bits) goes to json."""
    try:
        return orjson.dumps(obj, default=str, option=JSON_OPTIONS)
    except orjson.JSONEncodeError:
        return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode("utf-8")


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_bytes(path, json_bytes(obj))


def jsonl_line(row: Any) -> bytes:
    """One line of a JSON Lines artifact, as atomic_write_jsonl writes it."""
    return (json.dumps(row, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode("utf-8")


def atomic_write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    return atomic_write_bytes(path, (jsonl_line(r) for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSON Lines file; a torn last line (crash mid-append) is skipped, not fatal."""
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(orjson.loads(line))  # 2-3x json's speed; what it refuses (NaN, huge ints) goes to json
            except orjson.JSONDecodeError:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return rows


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (fcntl.flock) on `path` for the block; waits for other holders.

    The kernel drops the lock when its holder dies (even by SIGKILL), so a crash never leaves a
    stale lock behind. Used to build each domain once when two runs share a workspace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Workspace:
    """Paths of one workspace. Creating it makes the folders; nothing else happens here."""

    def __init__(self, root: Path | str):
        self.root = Path(root).resolve()
        for sub in ("corpus", "graph", "domains", "rollouts", "sft", "models", "reports", "cache"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.sqlite"

    @property
    def tools_path(self) -> Path:
        return self.root / "corpus" / "tools.parquet"

    @property
    def corpus_report_path(self) -> Path:
        return self.root / "corpus" / "report.json"

    @property
    def graph_dir(self) -> Path:
        return self.root / "graph"

    @property
    def domains_path(self) -> Path:
        """The discovered domains: a JSON list of {"domain", "tools": [ids], "names": [...], "edges": [...]}."""
        return self.root / "graph" / "domains.json"

    def domain_dir(self, domain_id: str) -> Path:
        return self.root / "domains" / domain_id

    def domain_lock(self, domain_id: str):
        """Context manager: the exclusive lock of one domain's folder (domains/<id>/.lock)."""
        return file_lock(self.domain_dir(domain_id) / ".lock")

    def rollout_dir(self, run_id: str) -> Path:
        return self.root / "rollouts" / run_id

    @property
    def sft_dir(self) -> Path:
        return self.root / "sft"

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    def domain_ids(self) -> list[str]:
        """Domains that have a finished environment (spec.json written last, atomically)."""
        base = self.root / "domains"
        return sorted(p.parent.name for p in base.glob("*/spec.json"))
