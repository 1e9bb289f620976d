"""Canonical state hash and field-level diff of an episode database (stdlib only).

Only the spec's tables and columns count. Each column is compared under its ColumnSpec policy:
  exact   - the stored value (json columns as stored text: toolkit and build_seed write sorted-key JSON)
  text    - strip + casefold + collapse whitespace
  numeric - within `tolerance` (the hash quantizes to round(v / tolerance) while that is exact,
            below 2**53; larger values are kept as they are, as another SQL type, so they never
            collide with quantized ones or with each other)
  ignore  - not part of the state (volatile timestamps, generated ids)
Rows are ordered by primary key (or by their canonical text when a key column is not `exact`),
so the hash does not depend on insertion order, VACUUM or file layout. The work is done in SQL
(one `group_concat` per table), so hashing a few MB costs a few milliseconds.

`StateOracle` computes both in the process that holds it (the caller of the sandbox), from the
database image the worker sends: no code the tool code could rebind (SQL functions on the
worker's connection, its modules) takes part. Per-table digests are cached and recomputed only
for tables that own a page that changed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from typing import Any

# Bump when the hash definition changes: stored gold hashes made under another version are stale
# (tasks/scenarios/build.py folds this into its environment hash, so scenarios are rebuilt).
# 2: numeric columns no longer saturate at 2**63 / tolerance.
HASH_VERSION = 2
EXACT_FLOAT = 9007199254740992  # 2**53
STATE_TIME_LIMIT = 120.0  # seconds for one hash or diff of an image (a hostile image cannot hang us)


def norm_text(v: Any) -> Any:
    return " ".join(v.casefold().split()) if isinstance(v, str) else v


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def register_functions(conn: sqlite3.Connection) -> None:
    """The SQL helpers the state queries use (call once per connection; survives deserialize)."""
    conn.create_function("as_norm_text", 1, norm_text, deterministic=True)


class TablePlan:
    """Precompiled SQL for one table's canonical rows."""

    def __init__(self, table: Any):
        self.name: str = table.name
        self.cols = [c for c in table.columns if c.policy != "ignore"]
        self.policy = {c.name: c.policy for c in self.cols}
        self.tol = {c.name: float(c.tolerance) for c in self.cols}
        self.json_cols = {c.name for c in table.columns if c.type == "json"}
        self.pk = list(table.primary_key)
        pk_policies = {c.name: c.policy for c in table.columns}
        self.pk_exact = bool(self.pk) and all(pk_policies.get(k) == "exact" for k in self.pk)
        self.norm = [self._expr(c) for c in self.cols]
        self.sql = {enc: self._compile(table, enc) for enc in ("json", "quote")}
        self.sql_detail = self.sql["quote"]["detail"]

    def _compile(self, table: Any, enc: str) -> dict[str, str]:
        """Row text: json_array(...) (fast, type-exact) or, for tables holding BLOBs, quote() joins."""
        def join(exprs: list[str]) -> str:
            if enc == "json":
                return f"json_array({', '.join(exprs)})"
            return " || ',' || ".join(f"quote({e})" for e in exprs) or "''"

        row = join(self.norm)
        t = _q(self.name)
        raw = ", ".join(_q(c.name) for c in self.cols) or "NULL"
        norms = ", ".join(f"quote({e})" for e in self.norm) or "NULL"
        out: dict[str, str] = {}
        if self.pk_exact:
            order = ", ".join(_q(k) for k in self.pk)
            pkraw = ", ".join(_q(k) for k in self.pk)
            key = join([_q(k) for k in self.pk])
            out["digest"] = f"SELECT count(*), group_concat(r, char(10)) FROM (SELECT {row} AS r FROM {t} ORDER BY {order})"
            out["keyed"] = f"SELECT {key}, {row}, {pkraw} FROM {t}"
            where = " AND ".join(f"{_q(k)} IS ?" for k in self.pk)
            out["detail"] = f"SELECT {norms}, {raw} FROM {t} WHERE {where}"
        else:
            out["digest"] = f"SELECT count(*), group_concat(r, char(10)) FROM (SELECT {row} AS r FROM {t} ORDER BY r)"
            out["keyed"] = f"SELECT {row}, {row} FROM {t}"
            out["detail"] = f"SELECT {row}, {norms}, {raw} FROM {t}"
        return out

    def _run(self, conn: sqlite3.Connection, what: str, params: tuple = (), enc: str | None = None
             ) -> tuple[str, Any]:
        """(encoding, all rows); errors surface while stepping, so rows are fetched here."""
        if enc is not None:
            return enc, conn.execute(self.sql[enc][what], params).fetchall()
        try:
            return "json", conn.execute(self.sql["json"][what], params).fetchall()
        except sqlite3.OperationalError as exc:
            if "BLOB" not in str(exc):
                raise
            return "quote", conn.execute(self.sql["quote"][what], params).fetchall()

    @staticmethod
    def _expr(c: Any) -> str:
        n = _q(c.name)
        if c.policy == "text":
            return f"as_norm_text({n})"
        if c.policy == "numeric" and float(c.tolerance) > 0:
            tol = float(c.tolerance)
            # quantized: an INTEGER of magnitude <= 2**53; beyond that the value itself, as an
            # INTEGER above 2**53 or as a REAL (never the same text as an INTEGER)
            return (f"(CASE WHEN typeof({n}) NOT IN ('integer','real') THEN {n} "
                    f"WHEN abs({n}) < {EXACT_FLOAT * tol!r} THEN CAST(round({n} / {tol!r}) AS INTEGER) "
                    f"WHEN typeof({n}) = 'integer' AND abs({n}) > {EXACT_FLOAT} THEN {n} "
                    f"ELSE CAST({n} AS REAL) END)")
        return n  # exact; json columns compare as stored text (always written as sorted-key JSON)

    def digest(self, conn: sqlite3.Connection) -> str:
        try:
            enc, rows = self._run(conn, "digest")
            n, text = rows[0]
        except sqlite3.DatabaseError as exc:  # table dropped / column missing / corrupt: a state of its own
            return "error:" + str(exc)
        cols = ",".join(c.name for c in self.cols)
        return hashlib.sha256(f"{self.name}|{cols}|{n}|{enc}\n{text or ''}".encode("utf-8", "surrogatepass")).hexdigest()

    def keyed(self, conn: sqlite3.Connection, enc: str | None = None) -> tuple[str, dict[str, tuple]]:
        """(encoding, {key text: (canonical row text, raw primary key values)})."""
        enc, cur = self._run(conn, "keyed", enc=enc)
        if self.pk_exact:
            return enc, {r[0]: (r[1], r[2:]) for r in cur}
        return enc, {r[0]: (r[1], None) for r in cur}

    def decode(self, col: str, v: Any) -> Any:
        if col in self.json_cols and isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                return v
        return v

    def _detail(self, conn: sqlite3.Connection, keys: list[str], rows: dict[str, tuple], enc: str
                ) -> dict[str, tuple]:
        """key -> (pk dict, normalized column values, raw column values) for the given keys."""
        nc = max(len(self.cols), 1)
        out = {}
        if self.pk_exact:
            for k in keys:
                pkvals = rows[k][1]
                r = conn.execute(self.sql_detail, pkvals).fetchone()
                out[k] = (dict(zip(self.pk, pkvals)), r[:nc], r[nc:])
            return out
        want = set(keys)
        _, cur = self._run(conn, "detail", enc=enc)
        for r in cur:
            if r[0] in want:
                out[r[0]] = ({"row": r[0]}, r[1:1 + nc], r[1 + nc:])
        return out

    def diff(self, before: sqlite3.Connection, after: sqlite3.Connection,
             a_keyed: tuple[str, dict[str, tuple]] | None = None) -> list[dict[str, Any]]:
        enc_a, a = self.keyed(before) if a_keyed is None else a_keyed
        enc, b = self.keyed(after)
        if enc != enc_a:  # a BLOB on one side only: compare both in the quote() encoding
            (enc_a, a), (enc, b) = self.keyed(before, "quote"), self.keyed(after, "quote")
        changed = [k for k, v in b.items() if k in a and a[k][0] != v[0]]
        added = [k for k in b if k not in a]
        removed = [k for k in a if k not in b]
        if not (changed or added or removed):
            return []
        da = self._detail(before, changed + removed, a, enc)
        db = self._detail(after, changed + added, b, enc)
        out: list[dict[str, Any]] = []
        names = [c.name for c in self.cols]
        for k in sorted(changed):
            pk, na, ra = da[k]
            _, nb, rb = db[k]
            for i, c in enumerate(names):
                if self.policy[c] == "numeric" and isinstance(ra[i], (int, float)) and isinstance(rb[i], (int, float)):
                    if abs(ra[i] - rb[i]) <= self.tol[c] + 1e-12:
                        continue
                elif na[i] == nb[i]:
                    continue
                out.append({"table": self.name, "key": pk, "column": c,
                            "before": self.decode(c, ra[i]), "after": self.decode(c, rb[i])})
        for k in sorted(added):
            pk, _, rb = db[k]
            out.append({"table": self.name, "key": pk, "column": None, "before": None,
                        "after": {c: self.decode(c, v) for c, v in zip(names, rb)}})
        for k in sorted(removed):
            pk, _, ra = da[k]
            out.append({"table": self.name, "key": pk, "column": None,
                        "before": {c: self.decode(c, v) for c, v in zip(names, ra)}, "after": None})
        return out


class StatePlan:
    """Hash and diff for a domain's tables (compile once per worker)."""

    def __init__(self, tables: list[Any]):
        self.tables = sorted((TablePlan(t) for t in tables), key=lambda p: p.name)

    def digests(self, conn: sqlite3.Connection) -> dict[str, str]:
        return {p.name: p.digest(conn) for p in self.tables}

    @staticmethod
    def combine(digests: dict[str, str]) -> str:
        text = "\n".join(f"{k}:{v}" for k, v in sorted(digests.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def state_hash(self, conn: sqlite3.Connection) -> str:
        return self.combine(self.digests(conn))

    def diff(self, before: sqlite3.Connection, after: sqlite3.Connection,
             before_digests: dict[str, str] | None = None, after_digests: dict[str, str] | None = None,
             before_keyed: dict[str, dict] | None = None) -> list[dict[str, Any]]:
        """Field-level diff before -> after: [{table, key, column, before, after}]; a whole added
        or removed row has column None and the row dict on one side. Tables whose digests match
        are skipped; before_keyed caches the before side's keyed rows per table (the seed's)."""
        bd = before_digests or self.digests(before)
        ad = after_digests or self.digests(after)
        out: list[dict[str, Any]] = []
        for p in self.tables:
            if ad[p.name] == bd[p.name]:
                continue
            try:
                if before_keyed is not None:
                    if p.name not in before_keyed:
                        before_keyed[p.name] = p.keyed(before)
                    out.extend(p.diff(before, after, before_keyed[p.name]))
                else:
                    out.extend(p.diff(before, after))
            except sqlite3.OperationalError as exc:
                out.append({"table": p.name, "key": {}, "column": None, "before": "table", "after": f"error: {exc}"})
        return out


# The oracle (in the caller's process) -----------------------------------------------------------
# Reading an image needs SELECT/READ/FUNCTION (and SQLite's own schema load, which asks for an
# UPDATE of sqlite_master); nothing that writes, attaches, recurses or changes the schema.
_IMAGE_DENY = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_DELETE,
               sqlite3.SQLITE_RECURSIVE, sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT,
               sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE,
               *range(sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_DROP_VIEW + 1)}


class _Image:
    """An in-memory connection over an untrusted database image: reads only (no recursive CTEs,
    no functions from the image's schema), and a time limit per operation."""

    def __init__(self, data: bytes):
        self.deadline = float("inf")
        self.loading = False  # deserialize() running: its own ATTACH is let through (see reload)
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA trusted_schema = OFF")
        register_functions(self.conn)
        self.conn.set_progress_handler(lambda: 1 if time.monotonic() > self.deadline else 0, 10000)
        self.conn.deserialize(data)  # dbstat after a second deserialize() crashes SQLite 3.40: see reload
        self.conn.set_authorizer(self._authorize)
        self.reloaded = False

    def reload(self, data: bytes) -> None:
        """Hold another image on the same connection (a third cheaper than a new one). Never use
        dbstat afterwards (SQLite 3.40 crashes); the schema is parsed again from the new image,
        with the authorizer on: while deserialize runs it lets through the one ATTACH that
        deserialize itself executes, and nothing else (deserialize runs nothing of the image).
        The authorizer is not installed again: that would expire every prepared statement, and
        preparing the state queries anew made each reload 4-6x dearer. The caller expires them
        (expire()) when the image's schema is not the one they were prepared on."""
        self.loading = True
        try:
            self.conn.deserialize(data)
        finally:
            self.loading = False
        self.reloaded = True

    def expire(self) -> None:
        """Make every prepared statement prepare (and be authorized) again on its next use."""
        self.conn.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: Any, arg2: Any, dbname: Any, trigger: Any) -> int:
        if self.loading:
            return sqlite3.SQLITE_OK if action == sqlite3.SQLITE_ATTACH else sqlite3.SQLITE_DENY
        if action in _IMAGE_DENY or (action == sqlite3.SQLITE_PRAGMA and arg2 is not None):
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 != "sqlite_master":  # SQLite's own schema load asks
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in ("load_extension", "readfile", "writefile"):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def start(self) -> sqlite3.Connection:
        self.deadline = time.monotonic() + STATE_TIME_LIMIT
        return self.conn

    def schema(self) -> dict[str, tuple]:
        try:
            rows = self.conn.execute("SELECT name, type, rootpage, sql FROM sqlite_master").fetchall()
        except sqlite3.DatabaseError as exc:
            return {"": ("error", str(exc))}
        return {r[0]: tuple(r[1:]) for r in rows}

    def close(self) -> None:
        self.conn.close()


def _page_size(image: bytes) -> int:
    ps = int.from_bytes(image[16:18], "big") if len(image) >= 100 else 0
    return 65536 if ps == 1 else ps


def _layout(image: bytes) -> bytes:
    """The file-header fields prepared statements depend on: page size, file format, reserved
    bytes, payload fractions (16-23), schema cookie and format, text encoding and the rest of
    40-67. Writes to rows change none of them (they change the counters at 24-39 and 92-99)."""
    return image[16:24] + image[40:68]


def changed_pages(a: bytes, b: bytes) -> set[int] | None:
    """1-based numbers of the pages that differ between two images (None: not comparable)."""
    ps = _page_size(a)
    if ps < 512 or ps != _page_size(b) or len(a) % ps or len(b) % ps:
        return None
    block = ps * 16
    out: set[int] = set()
    common = min(len(a), len(b))
    for o in range(0, common, block):
        # the first block holds the file header, whose change counter every write transaction
        # moves: compared page by page straight away
        if o == 0 or a[o:o + block] != b[o:o + block]:
            for p in range(o, min(o + block, common), ps):
                if a[p:p + ps] != b[p:p + ps]:
                    out.add(p // ps + 1)
    out.update(range(common // ps + 1, max(len(a), len(b)) // ps + 1))
    return out


ORACLE_VERSION = 1  # of StateOracle.stored()'s content; bump when what it holds or means changes


def oracle_key(plan: StatePlan, seed: bytes) -> str:
    """What a state oracle's seed digests and pages are a function of: the hash version, the
    digest queries and column lists of every table (the spec's tables as hashed) and the seed's bytes."""
    h = hashlib.sha256(f"state-oracle-v{ORACLE_VERSION}-hash-v{HASH_VERSION}\n".encode())
    for p in plan.tables:
        h.update(json.dumps([p.name, [c.name for c in p.cols], p.sql["json"]["digest"], p.sql["quote"]["digest"]])
                 .encode("utf-8", "surrogatepass"))
    h.update(seed)
    return h.hexdigest()


class StateOracle:
    """State hash and field diff of episode images, computed here from database bytes.

    `hash(image)` / `diff(image, against)`: images come from the sandbox worker's `snapshot` (or
    are the seed or a restored snapshot the caller already holds). The image last hashed stays
    loaded. A new one is compared page by page with the seed, and only the tables owning a
    changed page of the seed (SQLite's dbstat, read once from the seed) are digested; the others
    keep the seed's digests. Sound because a table's rows are what its b-tree holds, reached from
    its root page (the schema, compared in full): if no page of the seed's tree changed, reading
    the table reads the same pages. Against the seed, not the last image: an episode's image
    differs from the seed only where it wrote, so each load digests just those tables and never
    needs dbstat again (verification hashes thousands of unrelated episodes one after another).
    `stored`: a previous oracle's stored() for the same seed (a build keeps it beside the seed):
    its seed digests and pages are taken instead of computed (a few ms per domain when a
    verifier opens it); one for another seed or other tables is ignored."""

    def __init__(self, tables: list[Any], seed: bytes, stored: Any = None):
        self.plan = StatePlan(tables)
        self.names = [p.name for p in self.plan.tables]
        self.seed = seed
        self.seed_db = _Image(seed)
        self.db = _Image(seed)
        self.image = seed
        self.schema = self.db.schema()
        self.key = oracle_key(self.plan, seed)
        known = self._known(stored)  # the seed's digests and pages from a build, when they are for this seed
        self.from_store = known is not None
        self.digests = known[0] if known is not None else self._digest(self.names)
        self.seed_digests = dict(self.digests)
        self.seed_keyed: dict[str, tuple] = {}
        self.seed_schema = self.schema
        self.seed_layout = _layout(seed)
        self.prepared_on_seed = True  # the connection's prepared statements were prepared on the seed's schema
        self.pages = known[1] if known is not None else self._pages(self.names)  # the seed's pages of each table
        # the seed's pages of its schema table but page 1 (see _schema_is_seeds): as stored, else read
        # from dbstat when first needed (that query costs about a third of opening an oracle)
        self._schema: set[int] | None | bool = self._stored_schema_pages(stored) if self.from_store else False

    def _known(self, stored: Any) -> tuple[dict[str, str], dict[str, set[int]] | None] | None:
        """(seed digests, seed pages) from stored(), or None when it is not for this seed and these
        tables (another key) or not of stored()'s form: then they are computed."""
        if not isinstance(stored, dict) or stored.get("key") != self.key:
            return None
        digests, pages = stored.get("digests"), stored.get("pages")
        if not isinstance(digests, dict) or sorted(digests) != sorted(self.names) \
                or not all(isinstance(v, str) for v in digests.values()):
            return None
        if pages is None:
            return dict(digests), None
        if not isinstance(pages, dict) or sorted(pages) != sorted(self.names) or not all(
                isinstance(v, list) and all(type(x) is int for x in v) for v in pages.values()):
            return None
        return dict(digests), {n: set(v) for n, v in pages.items()}

    def stored(self) -> dict[str, Any]:
        """What a build keeps beside the seed (envs.episode.ORACLE_FILE) so that opening the domain
        later need not digest the seed and read its pages again: its key (oracle_key) makes one
        made for another seed, other tables or another hash version count as absent."""
        pages = None if self.pages is None else {n: sorted(p) for n, p in self.pages.items()}
        schema = self.schema_pages()
        return {"key": self.key, "digests": self.seed_digests, "pages": pages,
                "schema_pages": None if schema is None else sorted(schema)}

    @staticmethod
    def _stored_schema_pages(stored: dict[str, Any]) -> set[int] | bool:
        """The schema pages a stored() holds; False (read them when needed) when it has none, as
        one from before they were stored has none (None in it: the build had no dbstat)."""
        got = stored.get("schema_pages", False)
        if isinstance(got, list) and all(type(x) is int and x > 1 for x in got):
            return set(got)
        return False

    def _digest(self, names: Any) -> dict[str, str]:
        conn = self.db.start()
        out = {}
        for p in self.plan.tables:
            if p.name in names:
                kind = self.schema.get(p.name, ("table",))[0]
                out[p.name] = p.digest(conn) if kind == "table" else f"error:{p.name} is a {kind}, not a table"
        return out

    def _pages(self, names: Any) -> dict[str, set[int]] | None:
        """Pages (b-tree and overflow) of each table, from SQLite's dbstat; None without dbstat."""
        assert not self.db.reloaded  # (see _Image.reload)
        conn = self.db.start()
        out: dict[str, set[int]] = {}
        try:
            for name in names:
                out[name] = {r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,))}
        except sqlite3.DatabaseError:
            return None
        return out

    def schema_pages(self) -> set[int] | None:
        """The seed's pages of its schema table (sqlite_master) but page 1, from dbstat on the seed's
        own connection (never reloaded: see _Image.reload), read once; None without dbstat."""
        if self._schema is False:
            try:
                rows = self.seed_db.start().execute(
                    "SELECT pageno FROM dbstat WHERE name IN ('sqlite_schema', 'sqlite_master')").fetchall()
            except sqlite3.DatabaseError:
                rows = []
            self._schema = {r[0] for r in rows} - {1} if rows else None
        return self._schema  # type: ignore[return-value]

    def _schema_is_seeds(self, image: bytes, changed: set[int] | None) -> bool:
        """Does the image hold the seed's schema, without asking SQLite? Its schema table is the
        b-tree rooted at page 1: sound when page 1 below the file header and the seed's other pages
        of that tree are byte for byte the seed's, and so are the header fields SQLite reads it with
        (_layout); a page the image lacks counts as changed (changed_pages, which also found the
        two page sizes equal). Saves the schema query after each reload (a third of a load)."""
        if changed is None or _layout(image) != self.seed_layout:
            return False
        ps = _page_size(image)
        if image[100:ps] != self.seed[100:ps]:
            return False
        schema = self.schema_pages()
        return schema is not None and not changed & schema

    def load(self, image: bytes) -> None:
        """Make `image` the loaded state: the seed's digests, but for the tables it changed."""
        if image is self.image:
            return
        if len(image) == len(self.image) and image == self.image:
            self.image = image
            return
        changed = changed_pages(self.seed, image)
        self.db.reload(image)
        self.image = image
        as_seed = self._schema_is_seeds(image, changed)
        self.schema = self.seed_schema if as_seed else self.db.schema()
        # The state queries stay prepared across reloads while the image is laid out as the seed
        # (the same schema rows, root pages included, and header fields); else they prepare again.
        seed_like = as_seed or (self.schema == self.seed_schema and _layout(image) == self.seed_layout)
        if not (seed_like and self.prepared_on_seed):
            self.db.expire()
        self.prepared_on_seed = seed_like
        if changed is None or self.pages is None or self.schema != self.seed_schema:
            dirty: set[str] = set(self.names)
        else:
            dirty = {n for n in self.names if self.pages.get(n, set()) & changed}
        self.digests = {**self.seed_digests, **self._digest(dirty)}

    def hash(self, image: bytes) -> str:
        self.load(image)
        return self.plan.combine(self.digests)

    def diff(self, image: bytes, against: bytes | None = None) -> list[dict[str, Any]]:
        """Field-level diff from `against` (default: the seed) to `image`."""
        self.load(image)
        conn = self.db.start()
        if against is None or against is self.seed or against == self.seed:
            self.seed_db.start()
            return self.plan.diff(self.seed_db.conn, conn, self.seed_digests, self.digests, self.seed_keyed)
        other = _Image(against)
        try:
            other.start()
            return self.plan.diff(other.conn, conn, after_digests=self.digests)
        finally:
            other.close()

    def close(self) -> None:
        self.db.close()
        self.seed_db.close()
