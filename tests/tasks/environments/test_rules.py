"""Rule-based synthesizer: classification, schema inference, seed rows, generated code (text only:
nothing generated is executed in these tests; execution is covered in test_synthesize.py, in the sandbox)."""

from __future__ import annotations

import ast

from agentscaler.models import Tool
from agentscaler.schemas import is_valid
from envs.store import build_seed
from tasks.environments.verbs import classify
from tasks.environments.rules import synthesize_rules


def T(name: str, props: dict | None = None, req: list[str] | None = None, desc: str = "", kind=None,
      returns=None) -> Tool:
    return Tool(name=name, source_name=name, source="test", description=desc or name.replace("_", " "),
                parameters={"type": "object", "properties": props or {}, "required": req or []}, kind=kind,
                returns=returns).with_id()


SHOP = [
    T("get_user_details", {"user_id": {"type": "string"}}, ["user_id"]),
    T("list_user_orders", {"user_id": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, ["user_id"]),
    T("search_products", {"query": {"type": "string"}, "max_price": {"type": "number", "minimum": 0},
                          "category": {"type": "string", "enum": ["books", "toys"]}}, ["query"]),
    T("place_order", {"user_id": {"type": "string"}, "product_id": {"type": "string"},
                      "quantity": {"type": "integer", "minimum": 1, "maximum": 5}}, ["user_id", "product_id"]),
    T("cancel_order", {"order_id": {"type": "string"}, "reason": {"type": "string"}}, ["order_id"]),
    T("update_email", {"user_id": {"type": "string"}, "email": {"type": "string", "format": "email"}},
      ["user_id", "email"]),
    T("remove-product", {"product_id": {"type": "string"}}, ["product_id"]),
    T("getTime"),
    T("tagOrder", {"orderId": {"type": "string"}, "class": {"type": "string"}, "from": {"type": "integer"}},
      ["orderId"], desc="POST /orders/{id}/tags"),
]


def test_classify_by_corpus_http_verb_and_shape():
    assert classify(T("get_user", kind="write")) == ("write", "corpus")
    assert classify(T("fetch_thing", desc="Calls PUT /things")) == ("write", "http")
    assert classify(T("cancel_order", {"order_id": {"type": "string"}})) == ("write", "description")
    assert classify(T("search_flights", desc="Flights between two cities.")) == ("read", "name")
    assert classify(T("math_factorial", {"number": {"type": "integer"}}, ["number"]))[0] == "read"
    assert classify(T("thing_handler", {"payload": {"type": "object"}}, ["payload"])) == ("write", "shape")


def test_entities_tables_and_foreign_keys():
    syn = synthesize_rules("d1", SHOP)
    tables = {t.name: t for t in syn.spec.tables}
    assert {"users", "orders", "products"} <= set(tables)
    orders = tables["orders"]
    assert orders.primary_key == ["order_id"]
    fks = {c.name: c.foreign_key for c in orders.columns if c.foreign_key}
    assert fks["user_id"] == "users.user_id" and fks["product_id"] == "products.product_id"
    assert orders.column("quantity").type == "integer"
    assert tables["products"].column("price").type == "real"  # from max_price
    assert "status" in {c.name for c in orders.columns}  # cancel_order needs a state
    plans = syn.spec.report["plans"]
    assert plans["place_order"] == {"kind": "write", "kind_reason": "description", "action": "create",
                                    "entity": "order", "table": "orders", "verb": "place"}
    assert plans["cancel_order"]["action"] == "status"
    assert plans["get_user_details"]["action"] == "get"
    assert plans["list_user_orders"]["entity"] == "order"
    assert plans["tagOrder"]["kind"] == "write"
    assert {t.name: t.kind for t in syn.spec.tools}["search_products"] == "read"


def test_seed_rows_consistent_varied_and_schema_valid():
    syn = synthesize_rules("d1", SHOP)
    users = {r["user_id"] for r in syn.rows["users"]}
    products = {r["product_id"] for r in syn.rows["products"]}
    assert 4 <= len(syn.rows["orders"]) <= 8
    for r in syn.rows["orders"]:
        assert r["user_id"] in users and r["product_id"] in products
        assert is_valid(r["quantity"], {"type": "integer", "minimum": 1, "maximum": 5})
    # the states a move starts from, and the others (a wrong-state error), both seeded
    assert {r["status"] for r in syn.rows["orders"]} == {"active", "cancelled"}
    assert len({r["email"] for r in syn.rows["users"]}) == len(syn.rows["users"])
    for r in syn.rows["products"]:
        assert r["category"] in ("books", "toys")


def test_code_follows_the_contract_and_is_only_text():
    syn = synthesize_rules("d1", SHOP)
    tree = ast.parse(syn.tools_py)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for t in SHOP:
        fn = defs.get(t.name) or defs.get("tool_" + t.name.replace("-", "_"))
        assert fn is not None, t.name
        assert fn.args.args[0].arg == "db"
    # odd names: a hyphenated tool is exposed under its exact name; keyword parameters via **params
    assert "globals()['remove-product'] = tool_remove_product" in syn.tools_py
    assert defs["tagOrder"].args.kwarg is not None
    assert "raise ToolError(f\"order {row['order_id']} is already cancelled\")" in syn.tools_py
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(n) for n in imports] == ["import datetime", "from envs.toolkit import ToolError"]
    assert "class Orders(Base)" in syn.models_py


def test_deterministic_for_a_seed_and_varies_with_it():
    a, b = synthesize_rules("d1", SHOP, seed=0), synthesize_rules("d1", list(reversed(SHOP)), seed=0)
    assert a.tools_py == b.tools_py and a.rows == b.rows and a.spec == b.spec
    assert synthesize_rules("d1", SHOP, seed=1).rows != a.rows


def test_edges_keep_discovery_and_add_dataflow():
    given = [{"src": "search_products", "dst": "place_order", "kind": "similar", "weight": 0.7},
             {"src": "unknown_tool", "dst": "place_order", "kind": "similar", "weight": 0.9}]
    syn = synthesize_rules("d1", SHOP, given_edges=given)
    edges = {(e.src, e.dst, e.kind) for e in syn.spec.edges}
    assert ("search_products", "place_order", "similar") in edges
    assert not any(e[0] == "unknown_tool" for e in edges)
    # a lookup by the user's own id tells the caller nothing new about the user: no data flow to place_order
    assert ("get_user_details", "place_order", "dataflow") not in edges
    assert ("place_order", "cancel_order", "dataflow") in edges  # a created order's id feeds its cancel
    assert ("list_user_orders", "cancel_order", "dataflow") in edges


def test_duplicate_names_skipped_and_integer_ids():
    tools = [T("get_item", {"item_id": {"type": "integer"}}, ["item_id"]),
             T("get_item", {"id": {"type": "string"}}, ["id"]),
             T("add_item", {"name": {"type": "string"}}, ["name"])]
    syn = synthesize_rules("d2", tools)
    assert syn.skipped == {"get_item": "duplicate_name"}
    assert syn.spec.table("items").column("item_id").type == "integer"
    assert all(isinstance(r["item_id"], int) for r in syn.rows["items"])
    assert "_next_int(db, 'items', 'item_id')" in syn.tools_py


def test_id_lists_in_seed_point_to_existing_rows_and_noun_before_verb():
    tools = [T("get_item", {"item_id": {"type": "string"}}, ["item_id"]),
             T("exchange_order_items", {"order_id": {"type": "string"},
                                        "new_item_ids": {"type": "array", "items": {"type": "string"}}},
               ["order_id", "new_item_ids"]),
             T("todo_delete", {"content": {"type": "string"}}, ["content"])]
    syn = synthesize_rules("d3", tools)
    items = {r["item_id"] for r in syn.rows["items"]}
    for r in syn.rows["orders"]:
        assert r["new_item_ids"] and set(r["new_item_ids"]) <= items
    assert syn.spec.report["plans"]["todo_delete"]["entity"] == "todo"


def test_a_numeric_status_parameter_is_a_plain_numeric_column(tmp_path):
    """A corpus tool whose `status` parameter is a number: the seed holds numbers there, not the
    lifecycle words (the 30k-tool build of issue 23 lost a domain to `could not convert 'active' to float`)."""
    tools = [T("create_vienna", {"vienna_id": {"type": "string"}, "status": {"type": "number"},
                                 "name": {"type": "string"}}, ["vienna_id"]),
             T("get_vienna", {"vienna_id": {"type": "string"}}, ["vienna_id"]),
             T("cancel_vienna", {"vienna_id": {"type": "string"}}, ["vienna_id"])]
    syn = synthesize_rules("dnum", tools, seed=1)
    (table,) = [t for t in syn.spec.tables if any(c.name == "status" for c in t.columns)]
    assert next(c.type for c in table.columns if c.name == "status") == "real"
    assert all(isinstance(r["status"], (int, float)) for r in syn.rows[table.name])
    build_seed(syn.spec, syn.rows, tmp_path / "seed.sqlite")  # SQLAlchemy's Float accepts every value
