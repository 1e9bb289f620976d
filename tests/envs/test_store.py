"""Seed build through SQLAlchemy, models.py rendering, and episode copies that never touch the seed."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sqlite3
import sys
from pathlib import Path

import pytest

from envs.store import build_seed, load_seed_bytes, open_episode, render_models_py

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
from build import ROWS, build_shop, spec as shop_spec  # noqa: E402


def test_build_seed_creates_tables_rows_and_read_only_file(tmp_path):
    spec = shop_spec()
    rows = {k: list(v) for k, v in ROWS.items()}
    rows["users"][0] = {"user_id": "u1", "name": "Ada", "email": "a@x.org", "balance": 1.5}  # dict rows too
    path = build_seed(spec, rows, tmp_path / "seed.sqlite")
    assert path.exists() and not (tmp_path / "seed.sqlite-wal").exists()
    assert not (path.stat().st_mode & 0o222)  # read-only once built
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 3
    assert conn.execute("SELECT name FROM users WHERE user_id='u1'").fetchone()[0] == "Ada"
    cols = [r[1] for r in conn.execute("PRAGMA table_info(orders)")]
    assert cols == [c.name for c in spec.table("orders").columns]
    pk = [r[1] for r in conn.execute("PRAGMA table_info(orders)") if r[5]]
    assert pk == ["order_id"]
    conn.close()


def test_build_seed_adds_indexes_the_state_oracle_can_read(tmp_path):
    """An index on an innocuous expression is built and used, and a write under it still changes
    the state hash; one the oracle cannot parse (trusted_schema off: a JSON function) fails the build
    by name instead of turning every state hash into an error."""
    from envs.state import StateOracle

    spec, rows = shop_spec(), {k: list(v) for k, v in ROWS.items()}
    path = build_seed(spec, rows, tmp_path / "seed.sqlite", ["CREATE INDEX users_email ON users (lower(email))"])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    plan = conn.execute("EXPLAIN QUERY PLAN SELECT * FROM users WHERE lower(email) = ?", ("x",)).fetchall()
    assert "USING INDEX users_email" in plan[0][3]
    conn.close()
    seed = load_seed_bytes(path)
    episode = open_episode(seed)
    episode.execute("UPDATE users SET email = 'new@x.org' WHERE user_id = 'u1'")
    oracle = StateOracle(spec.tables, seed)
    assert not any(d.startswith("error:") for d in oracle.digests.values())
    assert oracle.hash(bytes(episode.serialize())) != oracle.hash(seed)
    with pytest.raises(ValueError, match="unusable with trusted_schema off.*json_valid"):
        build_seed(spec, rows, tmp_path / "bad.sqlite", ["CREATE INDEX users_j ON users (json_valid(name))"])
    assert not list(tmp_path.glob("*bad.sqlite*"))


def test_build_seed_rejects_bad_rows(tmp_path):
    spec = shop_spec()
    with pytest.raises(ValueError, match="unknown columns"):
        build_seed(spec, {"users": [{"user_id": "u9", "nope": 1}]}, tmp_path / "a.sqlite")
    with pytest.raises(ValueError, match="expected 4"):
        build_seed(spec, {"users": [("u9", "x")]}, tmp_path / "b.sqlite")
    with pytest.raises(ValueError, match="not in the spec"):
        build_seed(spec, {"ghosts": []}, tmp_path / "c.sqlite")
    assert not (tmp_path / "a.sqlite").exists()


def test_render_models_py_is_valid_sqlalchemy(tmp_path):
    src = render_models_py(shop_spec())
    ast.parse(src)
    p = tmp_path / "models.py"
    p.write_text(src)
    mod_spec = importlib.util.spec_from_file_location("shop_models", p)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    tables = mod.Base.metadata.tables
    assert set(tables) == {"users", "products", "orders"}
    assert [c.name for c in tables["orders"].primary_key.columns] == ["order_id"]
    assert {fk.target_fullname for fk in tables["orders"].foreign_keys} == {"users.user_id", "products.product_id"}


def test_models_py_uses_ascii_attributes_only():
    """Issue 22 class 8: a column named `ｎａｍｅ` became the attribute `ｎａｍｅ`, which Python
    reads as `name`: it silently replaced the real `name` column's attribute."""
    spec = shop_spec().model_copy(deep=True)  # the fixture's tables are shared
    users = spec.table("users")
    users.columns.append(users.columns[1].model_copy(update={"name": "ｎａｍｅ"}))
    src = render_models_py(spec)
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Users")
    attrs = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
    assert len(attrs) == len(set(attrs)) == len(users.columns), attrs
    assert src.count("ｎａｍｅ") == 1 and all(a.isascii() for a in attrs)  # the column keeps its name, quoted


def test_episode_copy_never_touches_seed(tmp_path):
    dest = build_shop(tmp_path / "shop")
    seed = dest / "seed.sqlite"
    digest = hashlib.sha256(seed.read_bytes()).hexdigest()
    data = load_seed_bytes(seed)
    conn = open_episode(data)
    conn.execute("DELETE FROM users")
    conn.execute("UPDATE products SET stock = 0")
    assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 0
    conn2 = open_episode(data)
    assert conn2.execute("SELECT count(*) FROM users").fetchone()[0] == 3
    assert hashlib.sha256(seed.read_bytes()).hexdigest() == digest
    assert not Path(f"{seed}-wal").exists() and not Path(f"{seed}-journal").exists()


def test_wal_seed_loads_into_memory(tmp_path):
    path = build_seed(shop_spec(), ROWS, tmp_path / "seed.sqlite")
    conn = open_episode(load_seed_bytes(path))
    conn.execute("BEGIN")
    conn.execute("UPDATE users SET balance = 0")
    conn.execute("COMMIT")
    assert conn.execute("SELECT sum(balance) FROM users").fetchone()[0] == 0


def test_sql_keywords_as_names_build(tmp_path):
    """Corpus names become tables and columns; SQLite's `returning` (and `order`, `select`) must be
    quoted in the DDL (the 30k-tool build of issue 23 lost a domain to `near "returning"`)."""
    from envs.spec import ColumnSpec, DomainSpec, TableSpec

    spec = DomainSpec(id="dkw", name="keywords", tools=[], tables=[TableSpec(
        name="order", primary_key=["select"],
        columns=[ColumnSpec(name="select", type="text"), ColumnSpec(name="returning", type="integer"),
                 ColumnSpec(name="group", type="real")])])
    path = build_seed(spec, {"order": [{"select": "s1", "returning": 1, "group": 2.5}]}, tmp_path / "seed.sqlite")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert conn.execute('SELECT "returning", "group" FROM "order"').fetchall() == [(1, 2.5)]
