"""What tool code sees: a guarded database helper (DB) and ToolError.

Tool code is untrusted. It runs only inside the sandbox worker, and reaches the database only
through this helper over a connection whose sqlite authorizer denies ATTACH/DETACH, PRAGMA
changes and extension loading, and whose progress handler enforces a time limit.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the sandbox worker stays light: no pydantic import there (duck-typed spec)
    from envs.spec import DomainSpec

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCAN = json.JSONDecoder().scan_once  # json.loads without its wrappers (C scanner; see _json_value)


class ToolError(Exception):
    """An API error the agent should see (not found, invalid state, missing field)."""


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ToolError(f"invalid identifier {name!r}")
    return f'"{name}"'


def _json_value(text: str) -> Any:
    """json.loads(text), or text itself when it is not JSON. The C scanner straight away when it
    reads the whole text (what a json column holds: written by json.dumps, no surrounding space):
    a row's json columns are decoded on every read, and json.loads' wrappers cost twice its parse
    there; anything else goes through json.loads, so the result and its failures are its own."""
    try:
        value, end = _SCAN(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError, RecursionError):
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class DB:
    """Row-level helper over one episode connection. Rows are dicts; json columns decode on read."""

    def __init__(self, conn: sqlite3.Connection, spec: "DomainSpec"):
        self.conn = conn
        self.spec = spec
        self._tables = {t.name: t for t in spec.tables}
        self._json_cols = {t.name: {c.name for c in t.columns if c.type == "json"} for t in spec.tables}
        self._bool_cols = {t.name: {c.name for c in t.columns if c.type == "boolean"} for t in spec.tables}
        self._selects: dict[tuple, str] = {}  # select()'s SQL by its shape: built once per episode, not per call

    # helpers ---------------------------------------------------------------------------------
    def _table(self, table: str) -> str:
        if table not in self._tables:
            raise ToolError(f"unknown table {table!r}")
        return _ident(table)

    def _decode(self, table: str, row: sqlite3.Row | tuple, cols: list[str]) -> dict[str, Any]:
        out = dict(zip(cols, row))
        for c in self._json_cols.get(table, ()):
            v = out.get(c)
            if isinstance(v, str):
                out[c] = _json_value(v)
        for c in self._bool_cols.get(table, ()):
            if out.get(c) is not None:
                out[c] = bool(out[c])
        return out

    def _encode(self, table: str, values: dict[str, Any]) -> dict[str, Any]:
        jc = self._json_cols.get(table, ())
        return {k: (json.dumps(v, sort_keys=True, ensure_ascii=False) if (k in jc or isinstance(v, (dict, list))) and v is not None
                    and not isinstance(v, str) else v) for k, v in values.items()}

    @staticmethod
    def _where(where: dict[str, Any]) -> tuple[str, list[Any]]:
        if not where:
            return "", []
        parts = [f"{_ident(k)} = ?" if v is not None else f"{_ident(k)} IS NULL" for k, v in where.items()]
        return " WHERE " + " AND ".join(parts), [v for v in where.values() if v is not None]

    # API ---------------------------------------------------------------------------------------
    def select(self, table: str, where: dict[str, Any] | None = None, order_by: str | None = None,
               limit: int | None = None) -> list[dict[str, Any]]:
        where = where or {}
        shape = (table, tuple((k, v is None) for k, v in where.items()), order_by, limit)
        sql = self._selects.get(shape)
        if sql is None:
            t = self._table(table)
            clause, _ = self._where(where)
            sql = f"SELECT * FROM {t}{clause}"
            if order_by:
                sql += f" ORDER BY {_ident(order_by)}"
            if limit is not None:
                sql += f" LIMIT {int(limit)}"
            if len(self._selects) >= 256:  # tool code varying its queries endlessly: start over
                self._selects.clear()
            self._selects[shape] = sql
        cur = self.conn.execute(sql, [v for v in where.values() if v is not None])
        cols = [d[0] for d in cur.description]
        return [self._decode(table, r, cols) for r in cur.fetchall()]

    def get(self, table: str, **key: Any) -> dict[str, Any] | None:
        rows = self.select(table, key, limit=1)
        return rows[0] if rows else None

    def insert(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        t = self._table(table)
        enc = self._encode(table, row)
        cols = ", ".join(_ident(k) for k in enc)
        marks = ", ".join("?" for _ in enc)
        try:
            self.conn.execute(f"INSERT INTO {t} ({cols}) VALUES ({marks})", list(enc.values()))
        except sqlite3.IntegrityError as exc:
            raise ToolError(f"cannot insert into {table}: {exc}") from None
        return dict(row)

    def update(self, table: str, key: dict[str, Any], values: dict[str, Any]) -> int:
        t = self._table(table)
        if not values:
            return 0
        enc = self._encode(table, values)
        sets = ", ".join(f"{_ident(k)} = ?" for k in enc)
        clause, params = self._where(key)
        try:
            cur = self.conn.execute(f"UPDATE {t} SET {sets}{clause}", list(enc.values()) + params)
        except sqlite3.IntegrityError as exc:
            raise ToolError(f"cannot update {table}: {exc}") from None
        return cur.rowcount

    def delete(self, table: str, key: dict[str, Any]) -> int:
        t = self._table(table)
        clause, params = self._where(key)
        if not clause:
            raise ToolError("delete needs a key")
        return self.conn.execute(f"DELETE FROM {t}{clause}", params).rowcount

    def query(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        cols = [d[0] for d in cur.description or ()]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def execute(self, sql: str, params: tuple | list = ()) -> int:
        return self.conn.execute(sql, params).rowcount

    def new_id(self, table: str, prefix: str) -> str:
        """Deterministic new id: prefix + (row count + 1), bumped until unused."""
        t = self._table(table)
        n = self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] + 1
        pk = self._tables[table].primary_key[0]
        while self.conn.execute(f"SELECT 1 FROM {t} WHERE {_ident(pk)} = ?", (f"{prefix}{n}",)).fetchone():
            n += 1
        return f"{prefix}{n}"

    def now(self) -> str:
        return self.spec.clock


# Guarded connection ---------------------------------------------------------------------------
_DENY_ALWAYS = {
    sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_CREATE_TABLE,
    sqlite3.SQLITE_CREATE_TEMP_INDEX, sqlite3.SQLITE_CREATE_TEMP_TABLE, sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
    sqlite3.SQLITE_CREATE_TEMP_VIEW, sqlite3.SQLITE_CREATE_TRIGGER, sqlite3.SQLITE_CREATE_VIEW,
    sqlite3.SQLITE_DROP_INDEX, sqlite3.SQLITE_DROP_TABLE, sqlite3.SQLITE_DROP_TEMP_INDEX,
    sqlite3.SQLITE_DROP_TEMP_TABLE, sqlite3.SQLITE_DROP_TEMP_TRIGGER, sqlite3.SQLITE_DROP_TEMP_VIEW,
    sqlite3.SQLITE_DROP_TRIGGER, sqlite3.SQLITE_DROP_VIEW, sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_REINDEX,
    sqlite3.SQLITE_ANALYZE, sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE,
}
_TXN = {sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT}
_WRITE_OPS = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
_DENY_FUNCS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_dbpage"}
# SQL functions that read the connection's change counters, which a connection carries from one
# episode to the next (see Guard.counters)
COUNTER_FUNCS = {"changes", "total_changes", "last_insert_rowid"}


class Guard:
    """The sqlite authorizer + progress-handler time limit of one episode connection.

    While `tool_mode` is on (tool code runs), transaction control is denied too, so a read tool
    cannot commit its way out of the rollback the worker puts around it.
    """

    def __init__(self, conn: sqlite3.Connection, time_limit_s: float = 2.0):
        self.conn = conn
        self.time_limit_s = time_limit_s
        self.tool_mode = False
        self.deadline = float("inf")
        self.loading = False  # a deserialize() in progress: its own ATTACH is let through (see load)
        # a statement prepared here calls changes(), total_changes() or last_insert_rowid(): on a
        # connection that held an earlier episode they would not start at 0 (envs.worker.run_episodes)
        self.counters = False
        conn.set_authorizer(self._authorize)
        try:
            conn.enable_load_extension(False)
        except AttributeError:  # built without extension support: nothing to disable
            pass
        conn.set_progress_handler(self._progress, 2000)

    def _authorize(self, action: int, arg1: Any, arg2: Any, dbname: Any, trigger: Any) -> int:
        if self.loading:
            return sqlite3.SQLITE_OK if action == sqlite3.SQLITE_ATTACH else sqlite3.SQLITE_DENY
        if action in _DENY_ALWAYS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:
            return sqlite3.SQLITE_DENY if arg2 is not None else sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            if name in _DENY_FUNCS:
                return sqlite3.SQLITE_DENY
            if name in COUNTER_FUNCS:
                self.counters = True
        if action in _WRITE_OPS and (arg1 or "").lower().startswith("sqlite_"):
            return sqlite3.SQLITE_DENY
        if self.tool_mode and action in _TXN:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def load(self, data: bytes, same_schema: bool = False) -> None:
        """Replace the connection's database with an in-memory copy of data (deserialize is
        refused under the authorizer, so it is lifted for the duration). Re-installing the
        authorizer expires every prepared statement, so each is authorized again after the load.
        same_schema (data is the image the connection already held at the start: the seed again,
        between verification's episodes): the authorizer stays, letting deserialize's own ATTACH
        through, and the prepared statements stay prepared, as they do from one call to the next
        (their schema is the same; preparing them again was most of a replayed episode's cost)."""
        if same_schema:
            self.loading = True
            try:
                self.conn.deserialize(data)
            finally:
                self.loading = False
            return
        self.conn.set_authorizer(None)
        try:
            self.conn.deserialize(data)
        finally:
            self.conn.set_authorizer(self._authorize)

    def _progress(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0

    def enter_tool(self) -> None:
        self.deadline = time.monotonic() + self.time_limit_s
        self.tool_mode = True

    def exit_tool(self) -> None:
        self.tool_mode = False
        self.deadline = float("inf")


def guard_connection(conn: sqlite3.Connection, time_limit_s: float = 2.0) -> Guard:
    """Install the authorizer (no ATTACH/DETACH, PRAGMA writes, schema changes, extension loading)
    and the progress-handler time limit on conn; returns the Guard that switches tool mode."""
    return Guard(conn, time_limit_s)
