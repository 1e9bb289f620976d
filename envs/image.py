"""A domain's database image in memory: the seed read without writing to it, and an episode's
private copy. The episode side of envs/store.py, apart so that the sandbox worker imports only
this (stdlib: os, sqlite3), not the seed builder's state oracle and its hashlib (every worker's
start paid for those).
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def load_seed_bytes(path: Path) -> bytes:
    """The seed database image, read without ever writing to the file (immutable, read-only)."""
    # os.path, not pathlib or urllib: the sandbox worker imports this module, and every worker's
    # start would pay for importing those (about 10 ms of CPU)
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"seed database {path} does not exist")
    uri = os.path.realpath(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")  # URI escapes
    src = sqlite3.connect(f"file:{uri}?mode=ro&immutable=1", uri=True)
    try:
        src.execute("SELECT count(*) FROM sqlite_master").fetchone()
        data = bytearray(src.serialize())
    finally:
        src.close()
    if data[18:20] == b"\x02\x02":  # a WAL-mode header: an in-memory copy must use a rollback journal
        data[18:20] = b"\x01\x01"
    return bytes(data)


def load_into(conn: sqlite3.Connection, data: bytes) -> None:
    """Replace conn's main database with a private, writable in-memory copy of data."""
    conn.deserialize(data)


def open_episode(data: bytes) -> sqlite3.Connection:
    """A fresh in-memory connection holding a copy of data (autocommit mode: transactions are explicit)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    load_into(conn, data)
    return conn
