"""The store: a domain's seed database (built once, read-only) and per-episode in-memory copies.

The seed is a SQLite file built from SQLAlchemy tables that mirror the spec's TableSpecs. An
episode never touches it: the worker reads the seed's bytes once and `deserialize`s a private
in-memory copy on every reset (about a millisecond for a few MB).

SQLAlchemy is imported only by the build-side functions. The episode side (`load_seed_bytes`,
`load_into`, `open_episode`) lives in envs/image.py, which the sandbox worker imports instead of
this module, and is re-exported here.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import sqlite3
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from envs.image import load_into, load_seed_bytes, open_episode  # noqa: F401 - the episode side, re-exported
from envs.state import StateOracle

if TYPE_CHECKING:
    from pathlib import Path

    from envs.spec import DomainSpec

_RESERVED = {"metadata", "registry", "Base"}
_PY_TYPES = {"integer": "int", "real": "float", "text": "str", "boolean": "bool", "json": "str"}
_SA_TYPES = {"integer": "Integer", "real": "Float", "text": "Text", "boolean": "Integer", "json": "Text"}


def metadata_for(spec: "DomainSpec"):
    """SQLAlchemy MetaData with one Table per TableSpec (json columns are TEXT holding JSON)."""
    import sqlalchemy as sa  # only a seed build needs it (the sandbox worker imports this module: ~0.5 s saved)

    types = {"integer": sa.Integer, "real": sa.Float, "text": sa.Text, "boolean": sa.Integer, "json": sa.Text}
    md = sa.MetaData()
    for t in spec.tables:
        cols = []
        for c in t.columns:
            args = []
            if c.foreign_key:
                args.append(sa.ForeignKey(c.foreign_key))
            # quote=True: corpus names may be SQL keywords SQLAlchemy does not know (SQLite's `returning`)
            cols.append(sa.Column(c.name, types[c.type](), *args, primary_key=c.name in t.primary_key,
                                  nullable=c.nullable and c.name not in t.primary_key,
                                  autoincrement=False, quote=True))
        sa.Table(t.name, md, *cols, quote=True)
    return md


def _encode_row(table, row: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
    names = [c.name for c in table.columns]
    if not isinstance(row, Mapping):
        if len(row) != len(names):
            raise ValueError(f"table {table.name}: row has {len(row)} values, expected {len(names)} ({names})")
        row = dict(zip(names, row))
    unknown = set(row) - set(names)
    if unknown:
        raise ValueError(f"table {table.name}: unknown columns {sorted(unknown)}")
    out: dict[str, Any] = {}
    for c in table.columns:
        v = row.get(c.name)
        if v is not None and c.type == "json" and not isinstance(v, str):
            v = json.dumps(v, sort_keys=True, ensure_ascii=False)
        elif v is not None and c.type == "boolean":
            v = int(bool(v))
        out[c.name] = v
    return out


def build_seed(spec: "DomainSpec", rows_by_table: Mapping[str, Iterable[Mapping[str, Any] | Sequence[Any]]],
               path: Path, indexes: Sequence[str] = ()) -> Path:
    """Create the seed database at path: tables from the spec (via SQLAlchemy), rows inserted,
    `indexes` (CREATE INDEX statements: lookups tool code makes by other columns than the key)
    created, then the file made read-only.

    Rows are dicts (column -> value) or tuples in column order; json values are stored as
    sorted-key JSON text. The build goes to a temp file, fsynced once and renamed into place
    (atomic): no journal on disk and no sync per transaction (nobody reads the temp file before
    the rename, and a crash leaves only it; the syncs were more than half of its wall time)."""
    from pathlib import Path  # build side only (see load_seed_bytes)

    import sqlalchemy as sa  # as in metadata_for

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    unknown = set(rows_by_table) - {t.name for t in spec.tables}
    if unknown:
        raise ValueError(f"rows given for tables not in the spec: {sorted(unknown)}")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    md = metadata_for(spec)
    engine = sa.create_engine(f"sqlite:///{tmp}", poolclass=sa.pool.StaticPool)  # one connection: the pragmas hold
    try:
        with engine.begin() as conn:
            # a rollback journal in memory (the file stays a self-contained rollback-journal database,
            # readable read-only anywhere) and no fsync per transaction: one fsync below
            conn.exec_driver_sql("PRAGMA journal_mode=MEMORY")
            conn.exec_driver_sql("PRAGMA synchronous=OFF")
        md.create_all(engine)
        with engine.begin() as conn:
            for t in spec.tables:
                rows = [_encode_row(t, r) for r in rows_by_table.get(t.name, ())]
                if rows:
                    conn.execute(md.tables[t.name].insert(), rows)
            for sql in indexes:
                conn.exec_driver_sql(sql)
    finally:
        engine.dispose()
    # The state oracle reads images with trusted_schema off: an index it cannot parse would make every
    # state hash an error, and every write look like none. Asked of the oracle itself.
    if indexes:
        with open(tmp, "rb") as fh:
            oracle = StateOracle(spec.tables, fh.read())
        oracle.close()
        bad = [d for d in oracle.seed_digests.values() if d.startswith("error:")]
        if bad:
            tmp.unlink(missing_ok=True)
            raise ValueError(f"{path}: an index is unusable with trusted_schema off: {bad[0][len('error:'):]}")
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.chmod(tmp, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    os.replace(tmp, path)
    return path


def render_models_py(spec: "DomainSpec") -> str:
    """SQLAlchemy 2 declarative source for the domain's models.py (documentation and reuse;
    the runtime itself works from spec.json)."""
    lines = [f'"""SQLAlchemy 2 models of domain {spec.id} ({spec.name}). Generated from spec.json: do not edit."""',
             "",
             "from sqlalchemy import Float, ForeignKey, Integer, Text",
             "from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column", "", "",
             "class Base(DeclarativeBase):", "    pass"]
    used: set[str] = {"Base"}
    for t in spec.tables:
        cls = "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", t.name) if p) or "Table"
        if not cls[0].isalpha():
            cls = "T" + cls
        while cls in used:
            cls += "_"
        used.add(cls)
        lines += ["", "", f"class {cls}(Base):", f"    __tablename__ = {t.name!r}", ""]
        attrs: set[str] = set()
        for c in t.columns:
            pk = c.name in t.primary_key
            py = _PY_TYPES[c.type]
            opt = c.nullable and not pk
            args = [_SA_TYPES[c.type]]
            if c.foreign_key:
                args.append(f"ForeignKey({c.foreign_key!r})")
            if pk:
                args.append("primary_key=True")
            if pk and c.type == "integer":
                args.append("autoincrement=False")
            if not opt and not pk:
                args.append("nullable=False")
            note = "  # JSON text" if c.type == "json" else ("  # 0/1" if c.type == "boolean" else "")
            attr = re.sub(r"[^A-Za-z0-9_]", "_", c.name)  # ASCII only: Python folds other identifiers (NFKC)
            if not attr.isidentifier() or keyword.iskeyword(attr) or attr in _RESERVED:
                attr = "col_" + attr
            while attr in attrs:
                attr += "_"
            attrs.add(attr)
            if attr != c.name:
                args.insert(0, repr(c.name))
            lines.append(f"    {attr}: Mapped[{py}{' | None' if opt else ''}] = mapped_column({', '.join(args)}){note}")
    return "\n".join(lines) + "\n"
