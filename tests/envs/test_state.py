"""Canonical state hash and field diff: properties (hypothesis) and column policies, on real SQLite."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.spec import ColumnSpec, TableSpec
from envs.state import StatePlan, register_functions

EXACT = [TableSpec(name="items", primary_key=["id"], columns=[
    ColumnSpec(name="id", type="integer", nullable=False), ColumnSpec(name="label"),
    ColumnSpec(name="qty", type="integer"), ColumnSpec(name="price", type="real"),
    ColumnSpec(name="meta", type="json")])]

POLICY = [TableSpec(name="users", primary_key=["user_id"], columns=[
    ColumnSpec(name="user_id", nullable=False), ColumnSpec(name="email", policy="text"),
    ColumnSpec(name="balance", type="real", policy="numeric", tolerance=0.01),
    ColumnSpec(name="updated_at", policy="ignore")]),
    TableSpec(name="events", primary_key=["event_id"], columns=[
        ColumnSpec(name="event_id", policy="ignore"), ColumnSpec(name="user_id"), ColumnSpec(name="what")])]


def _db(tables, rows_by_table) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    register_functions(conn)
    for t in tables:
        cols = ", ".join(f'"{c.name}"' for c in t.columns)
        conn.execute(f'CREATE TABLE "{t.name}" ({cols}, PRIMARY KEY ({", ".join(t.primary_key)}))')
        for r in rows_by_table.get(t.name, []):
            conn.execute(f'INSERT INTO "{t.name}" VALUES ({", ".join("?" for _ in t.columns)})', r)
    return conn


row = st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 3) | st.none(),
                st.sampled_from([1.5, 2.0, None]), st.sampled_from(['{"k": 1}', "[1,2]", None]))
rowsets = st.dictionaries(st.integers(0, 8), row, max_size=8)


def _rows(d):
    return [(k, *v) for k, v in d.items()]


@settings(max_examples=60, deadline=None)
@given(rowsets, st.randoms(use_true_random=False))
def test_hash_ignores_insertion_order_and_vacuum(d, rnd):
    rows = _rows(d)
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    plan = StatePlan(EXACT)
    a, b = _db(EXACT, {"items": rows}), _db(EXACT, {"items": shuffled})
    assert plan.state_hash(a) == plan.state_hash(b)
    b.execute("VACUUM")
    assert plan.state_hash(a) == plan.state_hash(b)
    assert plan.diff(a, b) == []


@settings(max_examples=80, deadline=None)
@given(rowsets, rowsets)
def test_diff_empty_iff_hashes_equal(d1, d2):
    plan = StatePlan(EXACT)
    a, b = _db(EXACT, {"items": _rows(d1)}), _db(EXACT, {"items": _rows(d2)})
    same_hash = plan.state_hash(a) == plan.state_hash(b)
    diff = plan.diff(a, b)
    assert same_hash == (diff == []), diff
    assert same_hash == (d1 == d2)
    # every changed key is reported, each row once per changed column
    changed = {k for k in d1.keys() & d2.keys() if d1[k] != d2[k]}
    assert {e["key"]["id"] for e in diff if e["column"] is not None} == changed
    assert {e["key"]["id"] for e in diff if e["column"] is None and e["before"] is None} == d2.keys() - d1.keys()
    assert {e["key"]["id"] for e in diff if e["column"] is None and e["after"] is None} == d1.keys() - d2.keys()


def test_diff_entries_shape():
    plan = StatePlan(EXACT)
    a = _db(EXACT, {"items": [(1, "a", 1, 1.5, '{"k": 1}'), (2, "b", 2, 2.0, None)]})
    b = _db(EXACT, {"items": [(1, "a", 5, 1.5, '{"k": 2}'), (3, "c", 0, None, None)]})
    assert plan.diff(a, b) == [
        {"table": "items", "key": {"id": 1}, "column": "qty", "before": 1, "after": 5},
        {"table": "items", "key": {"id": 1}, "column": "meta", "before": {"k": 1}, "after": {"k": 2}},
        {"table": "items", "key": {"id": 3}, "column": None, "before": None,
         "after": {"id": 3, "label": "c", "qty": 0, "price": None, "meta": None}},
        {"table": "items", "key": {"id": 2}, "column": None,
         "before": {"id": 2, "label": "b", "qty": 2, "price": 2.0, "meta": None}, "after": None},
    ]


def test_json_written_by_toolkit_and_seed_builder_hashes_alike(tmp_path):
    """json columns compare as stored text, so every writer must produce the same text."""
    from envs.store import build_seed, load_seed_bytes, open_episode
    from envs.spec import DomainSpec
    from envs.toolkit import DB

    spec = DomainSpec(id="j", name="j", tools=[], tables=EXACT)
    value = {"z": "é", "a": [1, {"y": 2, "b": None}]}
    a = open_episode(load_seed_bytes(build_seed(spec, {"items": [(1, "a", 1, 1.5, value)]}, tmp_path / "s.sqlite")))
    b = open_episode(load_seed_bytes(build_seed(spec, {"items": []}, tmp_path / "t.sqlite")))
    DB(b, spec).insert("items", {"id": 1, "label": "a", "qty": 1, "price": 1.5, "meta": value})
    for c in (a, b):
        register_functions(c)
    plan = StatePlan(EXACT)
    assert plan.state_hash(a) == plan.state_hash(b) and plan.diff(a, b) == []


def test_column_policies():
    plan = StatePlan(POLICY)
    base = {"users": [("u1", "Ada@Example.com", 10.0, "2024-01-01")], "events": [("e1", "u1", "login")]}
    same = {"users": [("u1", "  ada@example.COM ", 10.004, "2025-06-06")], "events": [("e9", "u1", "login")]}
    a, b = _db(POLICY, base), _db(POLICY, same)
    assert plan.state_hash(a) == plan.state_hash(b)
    assert plan.diff(a, b) == []
    changed = {"users": [("u1", "ada@other.com", 10.5, "x")], "events": [("e1", "u1", "logout")]}
    c = _db(POLICY, changed)
    assert plan.state_hash(a) != plan.state_hash(c)
    diff = plan.diff(a, c)
    cols = {(e["table"], e["column"]) for e in diff}
    assert ("users", "email") in cols and ("users", "balance") in cols
    assert ("users", "updated_at") not in cols
    # events keyed by an ignored id: the change shows as a removed and an added row
    ev = [e for e in diff if e["table"] == "events"]
    assert len(ev) == 2 and {e["before"] is None for e in ev} == {True, False}


def test_missing_table_is_a_state_not_a_crash():
    plan = StatePlan(EXACT)
    a = _db(EXACT, {"items": [(1, "a", 1, 1.5, None)]})
    b = _db([], {})
    assert plan.state_hash(a) != plan.state_hash(b)
    assert plan.diff(a, b)[0]["table"] == "items"


def test_blob_values_fall_back_to_quote_encoding():
    plan = StatePlan(EXACT)
    a = _db(EXACT, {"items": [(1, "a", 1, 1.5, None), (2, "b", 2, 2.0, None)]})
    b = _db(EXACT, {"items": [(2, "b", 2, 2.0, None), (1, b"\x00raw", 1, 1.5, None)]})
    c = _db(EXACT, {"items": [(1, b"\x00raw", 1, 1.5, None), (2, "b", 2, 2.0, None)]})
    assert plan.state_hash(b) == plan.state_hash(c) != plan.state_hash(a)
    assert plan.diff(a, b) == [{"table": "items", "key": {"id": 1}, "column": "label", "before": "a",
                                "after": b"\x00raw"}]
    assert plan.diff(b, c) == []


NUMERIC = [TableSpec(name="amounts", primary_key=["id"], columns=[
    ColumnSpec(name="id", type="integer", nullable=False),
    ColumnSpec(name="v", type="real", policy="numeric", tolerance=1e-6)])]


def test_numeric_tolerance_does_not_saturate():
    """Issue 22, class 10: CAST(round(v / tol) AS INTEGER) saturates at 2**63, so every value above
    ~9.2e12 (tolerance 1e-6) hashed alike. Distinct large values now hash apart; values within the
    tolerance still hash alike, and no large value collides with a small one."""
    plan = StatePlan(NUMERIC)

    def h(*vals):
        return plan.state_hash(_db(NUMERIC, {"amounts": list(enumerate(vals))}))

    assert h(1e20) != h(2e20) and h(-1e20) != h(-2e20) and h(1e300) != h(float("inf"))
    assert h(2**62) != h(2**62 + 1) and h(2**62) != h(2**62 + 10**10)  # integers past 2**53 stay exact
    assert h(1.0) == h(1.0000000001) and h(12345.678) == h(12345.6780000004)
    assert h(1e4) != h(1e10)  # 1e4 quantizes to 1e10: another SQL type than the value 1e10 itself
    assert h(9e9) != h(9.01e9) and h(2**53) != h(2**53 + 2)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "del", "grow"]), st.integers(0, 30), st.integers(0, 5000)),
                min_size=1, max_size=25))
def test_the_oracle_equals_a_full_recompute_after_any_writes(ops):
    """StateOracle digests again only the tables owning a changed page; whatever the writes (new
    pages, overflow chains, freed pages, page reuse across tables), its hash equals a full one."""
    from envs.state import StateOracle

    conn = _db(POLICY + EXACT, {"users": [(f"u{i}", f"u{i}@x", 1.0, "t") for i in range(20)],
                                "items": [(i, "x" * 300, i, 1.5, None) for i in range(40)]})
    plan = StatePlan(POLICY + EXACT)
    oracle = StateOracle(POLICY + EXACT, bytes(conn.serialize()))
    for op, k, size in ops:
        if op == "put":
            conn.execute("INSERT OR REPLACE INTO items VALUES (?, ?, 1, 2.0, NULL)", (k, "y" * size))
        elif op == "del":
            conn.execute("DELETE FROM items WHERE id = ?", (k,))
            conn.execute("DELETE FROM users WHERE user_id = ?", (f"u{k}",))
        else:
            conn.execute("INSERT OR REPLACE INTO users VALUES (?, ?, ?, 't')", (f"u{k}", "e" * size, k / 3))
            conn.execute("INSERT OR REPLACE INTO events VALUES (?, ?, ?)", (f"e{k}-{size}", f"u{k}", "z" * size))
        assert oracle.hash(bytes(conn.serialize())) == plan.state_hash(conn)
    assert oracle.diff(bytes(conn.serialize())) == plan.diff(_db(POLICY + EXACT, {
        "users": [(f"u{i}", f"u{i}@x", 1.0, "t") for i in range(20)],
        "items": [(i, "x" * 300, i, 1.5, None) for i in range(40)]}), conn)


def test_the_oracle_reads_a_hostile_image_safely():
    """An image where a spec table is a view (recursive, or calling a function it should not) is a
    state of its own, computed without running the view's recursion."""
    from envs.state import StateOracle

    conn = _db(EXACT, {"items": [(1, "a", 1, 1.0, None)]})
    seed = bytes(conn.serialize())
    conn.execute("DROP TABLE items")
    conn.execute("CREATE VIEW items AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                 "SELECT x AS id, 'a' AS label, 1 AS qty, 1.0 AS price, NULL AS meta FROM c")
    oracle = StateOracle(EXACT, seed)
    h = oracle.hash(bytes(conn.serialize()))
    assert oracle.digests["items"].startswith("error:") and h != oracle.hash(seed)


def test_the_oracle_after_a_hostile_image_hashes_the_next_one_right():
    """The oracle reuses one connection for every image it loads: an image that is not a database,
    or one whose table became a view, leaves nothing behind for the next (honest) image."""
    from envs.state import StateOracle

    conn = _db(EXACT, {"items": [(1, "a", 1, 1.0, None)]})
    seed = bytes(conn.serialize())
    plan = StatePlan(EXACT)
    oracle = StateOracle(EXACT, seed)
    conn.execute("UPDATE items SET qty = 2")
    honest = bytes(conn.serialize())
    view = _db([], {})
    view.execute("CREATE VIEW items AS SELECT 1 AS id, 'a' AS label, 2 AS qty, 1.0 AS price, NULL AS meta")
    for bad in (b"not a database" * 512, bytes(view.serialize())):
        assert oracle.hash(bad) not in (oracle.hash(seed), plan.state_hash(conn))
        assert oracle.hash(honest) == plan.state_hash(conn) != oracle.hash(seed)


def test_the_oracle_prepares_again_for_an_image_laid_out_otherwise():
    """The oracle keeps its state queries prepared across images laid out as the seed. An image
    whose tables sit at other root pages, its schema cookie forged to the seed's so SQLite itself
    would not notice, is hashed as a full recompute hashes it, and so is the honest one after it."""
    from envs.state import StateOracle

    rows = {"users": [(f"u{i}", f"u{i}@x", 1.0, "t") for i in range(5)], "items": [(1, "a", 1, 1.0, None)]}
    conn = _db(POLICY + EXACT, rows)
    seed = bytes(conn.serialize())
    plan = StatePlan(POLICY + EXACT)
    oracle = StateOracle(POLICY + EXACT, seed)
    conn.execute("UPDATE items SET qty = 2")
    honest = bytes(conn.serialize())
    other = sqlite3.connect(":memory:", isolation_level=None)
    other.execute("CREATE TABLE pad (x)")
    tables = EXACT + POLICY  # created in another order: every table at another root page
    for t in tables:
        cols = ", ".join(f'"{c.name}"' for c in t.columns)
        other.execute(f'CREATE TABLE "{t.name}" ({cols}, PRIMARY KEY ({", ".join(t.primary_key)}))')
    other.execute("INSERT INTO items VALUES (1, 'b', 7, 3.0, NULL)")
    other.execute("INSERT INTO users VALUES ('z', 'z@x', 9.0, 't')")
    forged = bytearray(other.serialize())
    forged[40:44] = seed[40:44]  # the seed's schema cookie
    forged = bytes(forged)
    check = _db([], {})
    check.deserialize(forged)
    for _ in range(2):
        assert oracle.hash(honest) == plan.state_hash(conn)
        assert oracle.hash(forged) == plan.state_hash(check) != oracle.hash(seed)
        assert oracle.hash(seed) == plan.state_hash(_db(POLICY + EXACT, rows))


@pytest.mark.parametrize("pads", [0, 40])
def test_the_oracle_reads_every_schema_change_it_does_not_query_for(pads: int):
    """After a reload the oracle takes the seed's schema without querying when the schema table's
    pages (page 1 below the header, and its other pages) are the seed's bytes and so are the header
    fields it is read with. On a seed whose schema fits page 1, and on one where it spans several
    (the spec's tables last, away from page 1), every change of the schema (a spec table dropped
    and made again, renamed, a column added, an index, a table) is seen, also with its schema
    cookie forged to the seed's: its schema is what SQLite reads and its hash a full recompute's.
    Writes to rows alone keep the seed's schema, unqueried."""
    from envs.state import StateOracle

    def seed_db() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        register_functions(conn)
        for i in range(pads):  # a schema table of several pages: page 1 an interior page
            conn.execute(f"CREATE TABLE pad{i} ({', '.join(f'column_with_a_long_name_{j}' for j in range(12))})")
        rows = {"users": [(f"u{i}", f"u{i}@x", 1.0, "t") for i in range(5)], "items": [(1, "a", 1, 1.0, None)]}
        for t in POLICY + EXACT:
            cols = ", ".join(f'"{c.name}"' for c in t.columns)
            conn.execute(f'CREATE TABLE "{t.name}" ({cols}, PRIMARY KEY ({", ".join(t.primary_key)}))')
            for r in rows.get(t.name, []):
                conn.execute(f'INSERT INTO "{t.name}" VALUES ({", ".join("?" for _ in t.columns)})', r)
        return conn

    seed = bytes(seed_db().serialize())
    plan = StatePlan(POLICY + EXACT)
    oracle = StateOracle(POLICY + EXACT, seed)
    pages = oracle.schema_pages()
    assert pages is not None and 1 not in pages and bool(pages) == bool(pads)
    stored = oracle.stored()  # a build keeps them: an oracle opened from it does not read dbstat
    assert StateOracle(POLICY + EXACT, seed, stored)._schema == oracle.schema_pages()
    assert StateOracle(POLICY + EXACT, seed, {**stored, "schema_pages": [1]})._schema is False  # read when needed
    older = {k: v for k, v in stored.items() if k != "schema_pages"}  # stored before they were
    assert StateOracle(POLICY + EXACT, seed, older).schema_pages() == oracle.schema_pages()
    changes = [
        ["UPDATE items SET qty = 5"],  # rows only: the seed's schema, not queried
        ["ALTER TABLE items RENAME TO items_old", "CREATE TABLE items (id, label, qty, price, meta, PRIMARY KEY (id))",
         "INSERT INTO items VALUES (1, 'b', 2, 3.0, NULL)"],
        ["DROP TABLE items", "CREATE TABLE items (id, label, qty, price, meta, PRIMARY KEY (id))",
         "INSERT INTO items VALUES (2, 'c', 3, 4.0, NULL)"],
        ["ALTER TABLE users ADD COLUMN extra"],
        ["CREATE INDEX items_label ON items (label)", "UPDATE items SET label = 'z'"],
        ["CREATE TABLE zz (x)"],
    ] + ([["DROP TABLE pad3"]] if pads else [])
    real_schema, queried = oracle.db.schema, []

    def counted() -> dict:
        queried.append(True)
        return real_schema()

    oracle.db.schema = counted
    for sql in changes:
        conn = seed_db()
        for q in sql:
            conn.execute(q)
        honest = bytes(conn.serialize())
        forged = honest[:40] + seed[40:44] + honest[44:]  # the seed's schema cookie
        for image in (honest, forged):
            loaded = sqlite3.connect(":memory:", isolation_level=None)
            register_functions(loaded)
            loaded.deserialize(image)
            queried.clear()
            assert oracle.hash(image) == plan.state_hash(loaded)
            assert oracle.schema == real_schema()  # what SQLite reads from the loaded image
            assert bool(queried) == (sql != changes[0]), sql
            assert oracle.hash(seed) == plan.state_hash(seed_db())


def test_a_stored_oracle_is_taken_only_for_its_own_seed_and_tables():
    """A build keeps the oracle's seed digests and pages (stored()); an oracle given them for the
    same seed and tables takes them and hashes and diffs every image as one that computed them;
    given them for another seed, other tables, or in another form, it computes its own."""
    from envs.state import StateOracle

    rows = {"users": [(f"u{i}", f"u{i}@x", 1.0, "t") for i in range(20)], "items": [(i, "x" * 300, i, 1.5, None)
                                                                                   for i in range(40)]}
    conn = _db(POLICY + EXACT, rows)
    seed = bytes(conn.serialize())
    built = StateOracle(POLICY + EXACT, seed)
    stored = built.stored()
    again = StateOracle(POLICY + EXACT, seed, stored)
    assert again.from_store and again.seed_digests == built.seed_digests and again.pages == built.pages
    conn.execute("UPDATE items SET qty = 7 WHERE id = 3")
    conn.execute("INSERT INTO users VALUES ('new', 'n@x', 2.0, 't')")
    image = bytes(conn.serialize())
    assert again.hash(image) == built.hash(image) == StatePlan(POLICY + EXACT).state_hash(conn) != again.hash(seed)
    assert again.diff(image) == built.diff(image) != []

    forged = {**stored, "digests": {k: "0" * 64 for k in stored["digests"]}}
    other_seed = bytes(_db(POLICY + EXACT, {"items": rows["items"]}).serialize())
    other_tables = [TableSpec(name="items", primary_key=["id"], columns=[c.model_copy(update={"policy": "ignore"})
                                                                        if c.name == "label" else c
                                                                        for c in EXACT[0].columns])] + POLICY
    for tables, data, given in ((POLICY + EXACT, other_seed, stored), (other_tables, seed, stored),
                                (POLICY + EXACT, seed, {**stored, "pages": {"items": "1"}}),
                                (POLICY + EXACT, seed, {**stored, "digests": {}}), (POLICY + EXACT, seed, None)):
        o = StateOracle(tables, data, given)
        assert not o.from_store and o.seed_digests == StateOracle(tables, data).seed_digests
    # the key is the seed's and the tables': digests forged under the right key are believed, as
    # the seed and gold hashes beside them are (the domain folder is the verifier's own input)
    assert StateOracle(POLICY + EXACT, seed, forged).from_store


def test_write_state_oracle_keeps_a_current_file(shop_domain):
    """write_state_oracle writes the file once for a seed; an Environment's oracle would take it."""
    import json

    from envs.episode import ORACLE_FILE, read_state_oracle, write_state_oracle
    from envs.spec import DomainSpec
    from envs.state import StateOracle
    from envs import store

    assert write_state_oracle(shop_domain) and (shop_domain / ORACLE_FILE).exists()
    assert not write_state_oracle(shop_domain)  # current: not written again
    spec = DomainSpec.load(shop_domain)
    seed = store.load_seed_bytes(shop_domain / spec.seed_path)
    o = StateOracle(spec.tables, seed, read_state_oracle(shop_domain))
    assert o.from_store and o.seed_digests == StateOracle(spec.tables, seed).seed_digests
    stale = json.loads((shop_domain / ORACLE_FILE).read_text())
    (shop_domain / ORACLE_FILE).write_text(json.dumps({**stale, "key": "0" * 64}))
    assert write_state_oracle(shop_domain)  # stale: written again
    assert json.loads((shop_domain / ORACLE_FILE).read_text()) == stale
