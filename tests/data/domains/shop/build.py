"""Build the hand-written `shop` fixture domain: spec.json, tools.py, models.py, seed.sqlite.

A small, fully known environment for tests of the runtime, scenarios, rollouts and verification.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from envs.spec import ColumnSpec, DomainSpec, Edge, TableSpec, ToolSpec

HERE = Path(__file__).parent


def _s(props: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


TOOLS = [
    ToolSpec(name="get_user", kind="read", description="Get a user's profile (name, email, balance) by user id.",
             parameters=_s({"user_id": {"type": "string", "description": "The user id, e.g. u1."}}, ["user_id"])),
    ToolSpec(name="find_products", kind="read", description="Search products whose name contains the query.",
             parameters=_s({"query": {"type": "string", "description": "Words of the product name."},
                            "max_price": {"type": "number", "minimum": 0, "description": "Highest price."}}, ["query"])),
    ToolSpec(name="get_order", kind="read", description="Get an order by order id.",
             parameters=_s({"order_id": {"type": "string", "description": "The order id, e.g. o1."}}, ["order_id"])),
    ToolSpec(name="list_user_orders", kind="read", description="List a user's orders.",
             parameters=_s({"user_id": {"type": "string"}}, ["user_id"])),
    ToolSpec(name="place_order", kind="write", description="Place an order of a product for a user; charges the balance.",
             parameters=_s({"user_id": {"type": "string"}, "product_id": {"type": "string"},
                            "quantity": {"type": "integer", "minimum": 1, "maximum": 5}}, ["user_id", "product_id"])),
    ToolSpec(name="cancel_order", kind="write", description="Cancel a placed order and refund it.",
             parameters=_s({"order_id": {"type": "string"}}, ["order_id"])),
    ToolSpec(name="update_email", kind="write", description="Change a user's email address.",
             parameters=_s({"user_id": {"type": "string"}, "email": {"type": "string", "format": "email"}},
                           ["user_id", "email"])),
]

TABLES = [
    TableSpec(name="users", primary_key=["user_id"], columns=[
        ColumnSpec(name="user_id", nullable=False), ColumnSpec(name="name"),
        ColumnSpec(name="email", policy="text"), ColumnSpec(name="balance", type="real", policy="numeric", tolerance=0.005)]),
    TableSpec(name="products", primary_key=["product_id"], columns=[
        ColumnSpec(name="product_id", nullable=False), ColumnSpec(name="name"),
        ColumnSpec(name="price", type="real"), ColumnSpec(name="stock", type="integer")]),
    TableSpec(name="orders", primary_key=["order_id"], columns=[
        ColumnSpec(name="order_id", nullable=False), ColumnSpec(name="user_id", foreign_key="users.user_id"),
        ColumnSpec(name="product_id", foreign_key="products.product_id"), ColumnSpec(name="quantity", type="integer"),
        ColumnSpec(name="status"), ColumnSpec(name="total", type="real"),
        ColumnSpec(name="created_at", policy="ignore")]),
]

EDGES = [Edge(src=a, dst=b) for a, b in [
    ("get_user", "list_user_orders"), ("get_user", "place_order"), ("get_user", "update_email"),
    ("find_products", "place_order"), ("list_user_orders", "get_order"), ("list_user_orders", "cancel_order"),
    ("get_order", "cancel_order"), ("place_order", "get_order"), ("place_order", "cancel_order")]]

ROWS = {
    "users": [("u1", "Ada Lovelace", "ada@example.com", 120.0), ("u2", "Alan Turing", "alan@example.com", 45.5),
              ("u3", "Grace Hopper", "grace@example.com", 300.0)],
    "products": [("p1", "Blue Mug", 8.5, 10), ("p2", "Red Mug", 9.0, 0), ("p3", "Desk Lamp", 35.0, 4),
                 ("p4", "Notebook", 3.25, 50)],
    "orders": [("o1", "u1", "p1", 2, "placed", 17.0, "2024-05-01T10:00:00"),
               ("o2", "u1", "p4", 1, "delivered", 3.25, "2024-04-20T09:00:00"),
               ("o3", "u3", "p3", 1, "placed", 35.0, "2024-05-10T12:30:00")],
}

_SQL_TYPES = {"integer": "INTEGER", "real": "REAL", "text": "TEXT", "boolean": "INTEGER", "json": "TEXT"}


def spec(domain_id: str = "shop") -> DomainSpec:
    return DomainSpec(id=domain_id, name="shop", description="A small shop: users, products, orders.",
                      tools=TOOLS, tables=TABLES, edges=EDGES, synthesizer="fixture")


def build_shop(dest: Path, domain_id: str = "shop") -> Path:
    """Write the domain into dest (a domain dir) and return it."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "tools.py", dest / "tools.py")
    (dest / "models.py").write_text("# hand-written fixture: the schema is created from spec.json tables\n")
    seed = dest / "seed.sqlite"
    seed.unlink(missing_ok=True)
    conn = sqlite3.connect(seed)
    for t in TABLES:
        cols = ", ".join(f'"{c.name}" {_SQL_TYPES[c.type]}{"" if c.nullable else " NOT NULL"}' for c in t.columns)
        pk = ", ".join(f'"{k}"' for k in t.primary_key)
        conn.execute(f'CREATE TABLE "{t.name}" ({cols}, PRIMARY KEY ({pk}))')
        marks = ", ".join("?" for _ in t.columns)
        conn.executemany(f'INSERT INTO "{t.name}" VALUES ({marks})', ROWS[t.name])
    conn.commit()
    conn.close()
    (dest / "spec.json").write_text(spec(domain_id).model_dump_json(indent=2))
    return dest


LEAVES_TRACES = """

import os as _os

_SEEN = []


def remember(db, note: str) -> dict:
    \"\"\"A read that leaves state outside the database: a module global, a file in scratch.\"\"\"
    _SEEN.append(note)
    where = _os.environ["TMPDIR"]
    with open(_os.path.join(where, f"note-{len(_SEEN)}"), "w") as fh:
        fh.write(note)
    return {"seen": list(_SEEN), "files": sorted(_os.listdir(where))}
"""


def build_shop_leaving_traces(dest: Path, tools: list[str] | None = None) -> Path:
    """The shop (only `tools` of it when given) and `remember`, a read that keeps every note in a
    module global and writes each to a file in scratch, answering with both: a tool whose output
    shows any state that carried over from an earlier call (needs a writable scratch)."""
    d = build_shop(dest)
    (d / "tools.py").write_text((d / "tools.py").read_text() + LEAVES_TRACES)
    s = DomainSpec.load(d)
    kept = [t for t in s.tools if tools is None or t.name in tools]
    s = s.model_copy(update={"tools": kept + [ToolSpec(
        name="remember", kind="read", description="Remember a note.",
        parameters=_s({"note": {"type": "string", "enum": ["north", "south", "east", "west"]}}, ["note"]))],
        "edges": [] if tools is not None else s.edges})
    (d / "spec.json").write_text(s.model_dump_json(indent=2))
    return d
