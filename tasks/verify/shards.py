"""Verification over several processes, one per core.

The verifier's own work (reading, the static checks, the replay's round trips, hashing states,
encoding) is Python under one GIL: one process cannot use more than one core, however many
sandbox children wait on it. `Shards` runs n verifier processes, each with its own sandbox workers
(opened on first use, kept open across runs); a run's lines go to the process of their domain
(a hash of the `"domain"` the line names, so a domain's workers live in one process), each
process verifies its lines exactly as one process would (tasks.verify.verify.verify_part) and
verify_run merges the parts in line order: the same verdicts, reason codes and files.

Which process a line goes to is only load balancing: a line whose `"domain"` is not found (or is
not its real one) is still read, checked and replayed in full where it lands.
"""

from __future__ import annotations

import multiprocessing
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agentscaler.workspace import Workspace
from envs.episode import Environment
from tasks.verify.replay import OPEN_THREADS, Replayer
from tasks.verify.verify import MAX_REPEATS, Part, verify_part

DOMAIN = re.compile(rb'"domain":"((?:[^"\\]|\\.)*)"')  # our writers put it before the messages


def shard_of(line: bytes, n: int) -> int:
    m = DOMAIN.search(line)
    return zlib.crc32(m.group(1)) % n if m else 0


class Shards:
    """n verifier processes over one workspace (spawned: no copy of this process's threads or
    sandbox pipes). verify(path) -> their Parts; close() ends them and their sandbox workers."""

    def __init__(self, ws: Workspace, n: int = 2):
        ctx = multiprocessing.get_context("spawn")
        self.n = n
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(n):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(theirs, str(ws.root), i, n), daemon=True,
                               name=f"verify-shard-{i}")
            proc.start()
            theirs.close()
            self.conns.append(mine)
            self.procs.append(proc)

    def verify(self, path: Path, max_repeats: int = MAX_REPEATS) -> list[Part]:
        """Their Parts of the run at `path`. Raises RuntimeError naming the process when one failed
        or is gone (killed, out of memory), instead of a bare broken-pipe error."""
        for i, c in enumerate(self.conns):
            try:
                c.send((str(path), max_repeats))
            except OSError as exc:
                raise self._gone(i, exc) from None
        parts = []
        for i, c in enumerate(self.conns):
            try:
                parts.append(c.recv())
            except (EOFError, OSError) as exc:
                raise self._gone(i, exc) from None
        for p in parts:
            if isinstance(p, BaseException):
                raise p
        return parts

    def _gone(self, i: int, exc: BaseException) -> RuntimeError:
        proc = self.procs[i]
        proc.join(timeout=5)
        code = proc.exitcode
        how = "is still running" if code is None else f"exited with code {code}" if code >= 0 else \
            f"was killed by signal {-code}"
        return RuntimeError(f"verifier shard {i} (pid {proc.pid}) {how}: {type(exc).__name__}: {exc}"[:2000])

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join()
        for c in self.conns:
            c.close()
        self.conns, self.procs = [], []

    def __enter__(self) -> "Shards":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _serve(conn: Connection, root: str, i: int, n: int) -> None:
    """One verifier process: verify its share of each run it is sent until it gets None. Its
    sandbox workers are opened by its own long-lived threads (a worker dies with the thread that
    started it) and stay open across runs."""
    ws = Workspace(Path(root))
    opener = ThreadPoolExecutor(OPEN_THREADS, thread_name_prefix=f"shard{i}-open")
    envs: dict[str, Environment] = {}
    try:
        while (msg := conn.recv()) is not None:
            path, max_repeats = msg
            try:
                conn.send(_part(ws, Path(path), max_repeats, i, n, envs, opener))
            except Exception as exc:  # noqa: BLE001 - the caller raises it
                conn.send(RuntimeError(f"verifier shard {i}: {type(exc).__name__}: {exc}"[:2000]))
    except EOFError:
        pass
    finally:
        for e in envs.values():
            e.close()
        opener.shutdown()


def _part(ws: Workspace, path: Path, max_repeats: int, i: int, n: int, envs: dict[str, Environment],
          opener: ThreadPoolExecutor) -> Part:
    """This process's share of the run at `path`. A domain seen for the first time gets its
    environment from the process's own long-lived threads (kept in `envs` for later runs), while
    the Replayer prefetches as it would; no pass over the file ahead of the one that reads it."""
    def open_env(domain: str) -> Environment | None:  # the Replayer asks only for domains `envs` lacks
        env = opener.submit(_open, ws, domain).result()
        if env is not None:
            envs[domain] = env  # one that cannot open is left to the Replayer, which says why
        return env

    with Replayer(ws.root / "domains", envs, open_env) as rp:
        return verify_part(ws, path, max_repeats, rp, take=lambda line: shard_of(line, n) == i)


def _open(ws: Workspace, domain: str) -> Environment | None:
    try:
        return Environment.open(ws.domain_dir(domain), spin_us=0)
    except Exception:  # noqa: BLE001
        return None
