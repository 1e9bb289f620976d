"""The run catalog: runs, per-domain stage status, and stage counts.

By default the workspace's catalog.sqlite, in WAL mode with a busy timeout, so several processes
(two pipeline runs, Prefect workers) on one host can share one workspace; every write is one short
transaction. `AGENTSCALER_CATALOG_URL` (a SQLAlchemy URL, e.g.
postgresql+psycopg://user@db/agentscaler) puts it on a database server instead, for workers on
several hosts: SQLite's locks do not hold over a network filesystem. One database per workspace.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, DateTime, Integer, String, Text, bindparam, create_engine, event, func, insert, inspect,
                        select, text, update)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from agentscaler.hashing import content_hash
from agentscaler.workspace import file_lock

STATUSES = ("pending", "running", "done", "failed")
# Set: the catalog lives on this database server (SQLAlchemy URL) instead of the workspace file.
CATALOG_URL_ENV = "AGENTSCALER_CATALOG_URL"


def worker_id() -> str:
    """Who is doing a domain's work: host and pid of the process (a flow run, or the CLI), prefixed
    with the Prefect worker's name when a worker started it (the worker sets PREFECT__WORKER_NAME)."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    name = os.environ.get("PREFECT__WORKER_NAME")
    return f"{name}@{where}" if name else where


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String, primary_key=True)
    flow: Mapped[str] = mapped_column(String)
    status: Mapped[str] = mapped_column(String, default="running")
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    summary: Mapped[dict] = mapped_column(JSON, default=dict)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=_now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)


class DomainStage(Base):
    """One row per (domain, stage): its status, how often it was tried, and the last error."""

    __tablename__ = "domain_stages"
    domain: Mapped[str] = mapped_column(String, primary_key=True)
    stage: Mapped[str] = mapped_column(String, primary_key=True)
    status: Mapped[str] = mapped_column(String, default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    artifact: Mapped[str | None] = mapped_column(String, nullable=True)  # content hash of the output
    worker: Mapped[str | None] = mapped_column(String, nullable=True)  # host:pid of the last process to mark it
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=_now, onupdate=_now)


class StageCount(Base):
    """Counters a stage reports for a run (accepted tools, rejected by reason, scenarios kept...)."""

    __tablename__ = "stage_counts"
    run_id: Mapped[str] = mapped_column(String, primary_key=True)
    stage: Mapped[str] = mapped_column(String, primary_key=True)
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[int] = mapped_column(Integer, default=0)


_ENGINES: dict[str, Engine] = {}
# Any fixed number: the server-side lock that makes creating the tables one process at a time.
_SCHEMA_LOCK = 7_240_016


def catalog_url() -> str | None:
    """The catalog's database server (AGENTSCALER_CATALOG_URL), or None for the workspace file."""
    return os.environ.get(CATALOG_URL_ENV) or None


def engine_for(path: Path) -> Engine:
    """The engine of AGENTSCALER_CATALOG_URL when set, else of the SQLite file at `path`."""
    url = catalog_url()
    return _server_engine(url) if url else _sqlite_engine(path)


def _server_engine(url: str) -> Engine:
    if url not in _ENGINES:
        eng = create_engine(url, pool_pre_ping=True)
        with eng.begin() as conn:  # two workers opening a new catalog at once: one creates the tables
            if eng.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
            Base.metadata.create_all(conn)
            _add_missing_columns(conn)
        _ENGINES[url] = eng
    return _ENGINES[url]


def _sqlite_engine(path: Path) -> Engine:
    key = str(Path(path).resolve())
    if key not in _ENGINES:
        Path(key).parent.mkdir(parents=True, exist_ok=True)
        eng = create_engine(f"sqlite:///{key}", connect_args={"timeout": 60})

        @event.listens_for(eng, "connect")
        def _pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()
            dbapi_conn.isolation_level = None  # we BEGIN ourselves (below), not pysqlite before DML only

        @event.listens_for(eng, "begin")
        def _begin(conn):  # noqa: ANN001
            # Every transaction takes the write lock up front, so a read-modify-write (attempts + 1)
            # by two processes at once is serialized instead of losing one update.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        # create_all checks then creates: two processes opening a new catalog at once would race.
        with file_lock(Path(key + ".lock")):
            with eng.begin() as conn:
                Base.metadata.create_all(conn)
                _add_missing_columns(conn)
        _ENGINES[key] = eng
    return _ENGINES[key]


def _add_missing_columns(conn: Any) -> None:
    """A catalog written before a column existed gets it (nullable), so old workspaces still open."""
    found = inspect(conn)
    for table in Base.metadata.sorted_tables:
        have = {c["name"] for c in found.get_columns(table.name)}
        for col in table.columns:
            if col.name not in have:
                kind = col.type.compile(conn.dialect)
                conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {col.name} {kind}")


class Catalog:
    """Small API over catalog.sqlite; every method is one transaction."""

    def __init__(self, path: Path):
        self.engine = engine_for(path)

    # runs -----------------------------------------------------------------------------
    def start_run(self, run_id: str, flow: str, params: dict[str, Any] | None = None) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(Run, run_id)
            if run is None:
                s.add(Run(id=run_id, flow=flow, params=json.loads(json.dumps(params or {}, default=str))))
            else:
                run.status, run.finished_at = "running", None

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None = None) -> None:
        with Session(self.engine) as s, s.begin():
            run = s.get(Run, run_id)
            if run is not None:
                run.status, run.finished_at = status, _now()
                run.summary = json.loads(json.dumps(summary or {}, default=str))

    def runs(self) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            rows = s.scalars(select(Run).order_by(Run.started_at)).all()
            return [
                {"id": r.id, "flow": r.flow, "status": r.status, "params": r.params, "summary": r.summary,
                 "started_at": r.started_at.isoformat(), "finished_at": r.finished_at.isoformat() if r.finished_at else None}
                for r in rows
            ]

    # domain stages ----------------------------------------------------------------------
    def mark(self, domain: str, stage: str, status: str, error: str | None = None,
             artifact: str | None = None) -> None:
        """Record a domain's stage status; 'running' counts an attempt."""
        self.mark_many([domain], stage, status, error, [artifact])

    def mark_many(self, domains: list[str], stage: str, status: str, error: str | None = None,
                  artifacts: list[str | None] | None = None) -> None:
        """mark() for many domains in one transaction (discover marks every domain it found: one
        transaction each cost ~5 ms at load, 18 s at 30k tools); artifacts[i] belongs to domains[i]."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        pairs = list(zip(domains, artifacts if artifacts is not None else [None] * len(domains), strict=True))
        try:
            self._mark(pairs, stage, status, error)
        except IntegrityError:  # a server catalog: another process inserted a row first; now it exists
            self._mark(pairs, stage, status, error)

    def _mark(self, pairs: list[tuple[str, str | None]], stage: str, status: str, error: str | None) -> None:
        # SQLAlchemy Core, not the ORM: a build marks each domain four times, and an ORM session per
        # mark cost ~2 ms of CPU (5% of a domain's build at 30k tools); this costs a fraction of that
        t = DomainStage.__table__
        values: dict[str, Any] = {"status": status, "worker": worker_id()}
        if status == "failed":
            values["last_error"] = (error or "unknown error")[:4000]
        elif status == "done":
            values["last_error"] = None
        with self.engine.begin() as conn:
            have: set[str] = set()
            for i in range(0, len(pairs), 500):  # the rows there are, 500 a query
                # FOR UPDATE: on a server, two processes' read-modify-write (attempts + 1) go one at a
                # time (SQLite's BEGIN IMMEDIATE already serializes them; it ignores the clause)
                q = select(t.c.domain).where(t.c.stage == stage, t.c.domain.in_([d for d, _ in pairs[i:i + 500]]))
                have.update(conn.scalars(q.with_for_update()))
            for artifact in {a for _, a in pairs}:  # one executemany per shape of row
                rows = [d for d, a in pairs if a == artifact]
                v = dict(values, **({"artifact": artifact} if artifact is not None else {}))
                old = [{"d": d} for d in dict.fromkeys(rows) if d in have]
                if old:
                    attempts = {"attempts": func.coalesce(t.c.attempts, 0) + 1} if status == "running" else {}
                    conn.execute(update(t).where(t.c.stage == stage, t.c.domain == bindparam("d"))
                                 .values(**v, **attempts), old)
                new = [dict(v, domain=d, stage=stage, attempts=int(status == "running"))
                       for d in dict.fromkeys(rows) if d not in have]
                if new:
                    conn.execute(insert(t), new)
                have.update(rows)

    def stage_status(self, domain: str, stage: str) -> dict[str, Any] | None:
        with Session(self.engine) as s:
            row = s.get(DomainStage, (domain, stage))
            if row is None:
                return None
            return {"status": row.status, "attempts": row.attempts, "error": row.last_error, "artifact": row.artifact,
                    "worker": row.worker}

    def domains(self, stage: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Per-(domain, stage) rows, optionally filtered."""
        with Session(self.engine) as s:
            q = select(DomainStage).order_by(DomainStage.domain, DomainStage.stage)
            if stage:
                q = q.where(DomainStage.stage == stage)
            if status:
                q = q.where(DomainStage.status == status)
            return [
                {"domain": r.domain, "stage": r.stage, "status": r.status, "attempts": r.attempts,
                 "error": r.last_error, "artifact": r.artifact, "worker": r.worker,
                 "updated_at": r.updated_at.isoformat() if r.updated_at else ""}
                for r in s.scalars(q).all()
            ]

    def domain_summary(self) -> dict[str, Any]:
        """One line per domain: failed if any stage failed, else the latest stage's status.

        This is the `agentscaler status --json` shape: {"domains": [...], "counts": {...}}.
        """
        per: dict[str, dict[str, Any]] = {}
        for row in self.domains():
            cur = per.setdefault(row["domain"], {"domain": row["domain"], "status": "done", "attempts": 0,
                                                 "error": None, "stages": {}, "worker": None, "_t": ""})
            cur["stages"][row["stage"]] = row["status"]
            if row["worker"] and row["updated_at"] >= cur["_t"]:  # the worker of the last stage marked
                cur["worker"], cur["_t"] = row["worker"], row["updated_at"]
            cur["attempts"] = max(cur["attempts"], row["attempts"])
            if row["status"] == "failed":
                cur["status"], cur["error"] = "failed", f"{row['stage']}: {row['error']}"
            elif row["status"] in ("running", "pending") and cur["status"] != "failed":
                cur["status"] = row["status"]
        domains = sorted(({k: v for k, v in d.items() if k != "_t"} for d in per.values()), key=lambda d: d["domain"])
        return {"domains": domains, "counts": dict(Counter(d["status"] for d in domains))}

    # counts -------------------------------------------------------------------------------
    def set_counts(self, run_id: str, stage: str, counts: dict[str, int]) -> None:
        with Session(self.engine) as s, s.begin():
            for key, value in counts.items():
                row = s.get(StageCount, (run_id, stage, key))
                if row is None:
                    s.add(StageCount(run_id=run_id, stage=stage, key=key, value=int(value)))
                else:
                    row.value = int(value)

    def counts(self, run_id: str | None = None) -> dict[str, dict[str, int]]:
        with Session(self.engine) as s:
            q = select(StageCount)
            if run_id:
                q = q.where(StageCount.run_id == run_id)
            out: dict[str, dict[str, int]] = {}
            for r in s.scalars(q).all():
                out.setdefault(r.stage, {})[r.key] = out.get(r.stage, {}).get(r.key, 0) + r.value
            return out


@contextmanager
def run_record(catalog: Catalog, flow: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Record a flow run in the catalog; the body fills the yielded summary dict.

    The run ends `failed` if the body raises, else `done`, or `done_with_failures` when the
    summary names failed items; a body may also set summary["status"] itself (e.g. "failed" for
    an ingest that accepted nothing)."""
    run_id = f"{flow}-" + content_hash({"params": params, "t": time.time_ns()})
    catalog.start_run(run_id, flow, params)
    summary: dict[str, Any] = {"run_id": run_id}
    try:
        yield summary
    except BaseException as exc:
        catalog.finish_run(run_id, "failed", {**summary, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        raise
    failed = summary.get("failed") or {}
    status = summary.pop("status", None) or ("done" if not failed else "done_with_failures")
    catalog.finish_run(run_id, status, summary)
