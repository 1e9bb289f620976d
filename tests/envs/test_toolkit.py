"""The DB helper tool code gets (envs.toolkit), on a real episode copy of the shop seed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.spec import DomainSpec
from envs.store import load_seed_bytes, open_episode
from envs.toolkit import DB, ToolError, _json_value

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
from build import build_shop  # noqa: E402


@pytest.fixture()
def db(tmp_path) -> DB:
    shop = build_shop(tmp_path / "shop")
    conn = open_episode(load_seed_bytes(shop / "seed.sqlite"))
    return DB(conn, DomainSpec.load(shop))


def test_select_sql_is_built_once_per_shape_and_answers_each_call(db):
    """select() keeps its SQL by shape (table, where keys and which are None, order, limit): a second
    call with other values reuses it and still binds its own values; a None value is its own shape
    (IS NULL, not = NULL)."""
    assert db.get("users", user_id="u1")["name"] == "Ada Lovelace"
    assert db.get("users", user_id="u2")["user_id"] == "u2"
    assert db.get("users", user_id="nobody") is None
    assert len(db._selects) == 1
    db.update("users", {"user_id": "u2"}, {"email": None})
    assert [r["user_id"] for r in db.select("users", {"email": None})] == ["u2"]
    assert [r["user_id"] for r in db.select("users", {"email": "ada@example.com"})] == ["u1"]
    ids = [r["user_id"] for r in db.select("users", order_by="user_id")]
    assert ids == sorted(ids) and len(ids) >= 2
    assert len(db.select("users", order_by="user_id", limit=1)) == 1
    assert len(db._selects) == 5


def test_select_refuses_bad_names_every_time(db):
    for _ in range(2):  # nothing cached for a refused shape
        with pytest.raises(ToolError, match="unknown table 'nope'"):
            db.select("nope", {"id": 1})
        with pytest.raises(ToolError, match="invalid identifier"):
            db.select("users", {"user_id; DROP TABLE users": 1})
        with pytest.raises(ToolError, match="invalid identifier"):
            db.select("users", order_by="name DESC; --")
    assert db._selects == {}


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                         max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from(["", " ", "\n", "x", "]", "{"]), st.sampled_from(["", " ", "\t"]))
def test_a_json_column_decodes_as_json_loads_would(value, tail, head):
    """_json_value (the C scanner when it reads the whole text) returns what json.loads returns, or
    the text itself where json.loads fails (NaN compared as text: NaN != NaN)."""
    text = head + json.dumps(value) + tail
    try:
        want = json.loads(text)
    except json.JSONDecodeError:
        want = text
    assert json.dumps(_json_value(text)) == json.dumps(want)
    assert type(_json_value(text)) is type(want)
