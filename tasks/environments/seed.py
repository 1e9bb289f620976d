"""Seed rows of a planned domain: consistent foreign keys, varied values valid against the parameter schemas.

The same value generator grounds scenario arguments (tasks.scenarios.values), so seed values are
valid arguments by construction. States, counters and clock fields follow the plan: most rows in
a state the domain's moves start from (so actions succeed) and some in others (so the errors a
real API gives occur too); seats and stock mostly available, one sold out; clock fields around the
episode clock (a session started hours before it, a loan due days after or overdue).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

from tasks.environments.plan import Entity
from tasks.environments.verbs import TERMINAL
from tasks.scenarios.values import gen_value, valid

MONEY_COLUMNS = {"balance": (40.0, 2000.0), "hourly_rate": (1.5, 8.0), "total_price": (5.0, 300.0)}


def _pk_values(e: Entity, n: int, rng: random.Random) -> list[Any]:
    s = e.pk_schema or {}
    if isinstance(s.get("enum"), list) and s["enum"]:
        vals = list(dict.fromkeys(s["enum"]))
        return vals[: max(1, min(len(vals), n))]
    constrained = any(k in s for k in ("pattern", "format", "minimum", "maximum", "minLength", "maxLength"))
    if constrained:
        out: list[Any] = []
        for _ in range(n * 20):
            v = gen_value(s, e.pk, rng)
            if v not in out and valid(v, s):
                out.append(v)
            if len(out) == n:
                break
        if out:
            return out
    if e.pk_type == "integer":
        return list(range(1, n + 1))
    return [f"{e.prefix}{i}" for i in range(1, n + 1)]


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def _status(states: list[str], i: int) -> str:
    """Even rows in the first (initial) state, the others through the remaining states in turn."""
    s = states
    if len(s) == 1 or i % 2 == 0:
        return s[0]
    return s[1 + (i // 2) % (len(s) - 1)]


def _special(e: Entity, col: str, row: dict[str, Any], i: int, now: dt.datetime, rng: random.Random) -> Any:
    """Values of the columns the plan adds (counters, money, clock fields); None: not special."""
    state = row.get("status")
    done = state in TERMINAL
    if col == e.quantity:
        return 0 if i == 3 else rng.randint(2, 40)
    if col in MONEY_COLUMNS:
        lo, hi = MONEY_COLUMNS[col]
        return round(rng.uniform(lo, hi), 2)
    if col in ("fee", "late_fee"):
        return round(rng.uniform(2, 30), 2) if done else 0.0
    if col == "refills_left":
        return 0 if i == 2 else rng.randint(1, 3)
    if col == "started_at":
        return _iso(now - dt.timedelta(hours=rng.randint(1, 72)))
    if col == "ended_at":
        return _iso(now - dt.timedelta(hours=rng.randint(0, 1), minutes=rng.randint(1, 59))) if done else None
    if col == "ends_at":
        return _iso(now + dt.timedelta(hours=rng.randint(1, 6)))
    if col == "due_date":
        return _iso(now + dt.timedelta(days=rng.randint(-5, 14)))
    if col == "returned_at":
        return _iso(now - dt.timedelta(days=rng.randint(1, 9))) if state == "returned" else None
    return _NOT


_NOT = object()


def seed_rows(entities: dict[str, Entity], rng: random.Random, clock: str) -> dict[str, list[dict[str, Any]]]:
    now = dt.datetime.fromisoformat(clock[:19])
    pks = {name: _pk_values(e, rng.randint(4, 8), rng) for name, e in sorted(entities.items())}
    by_table = {e.table: e for e in entities.values()}
    rows: dict[str, list[dict[str, Any]]] = {}
    pool: dict[str, list[Any]] = {}  # column name -> values seeded so far, shared across tables
    for name, e in sorted(entities.items()):
        out = []
        used: dict[str, set[Any]] = {}  # values of this table, shared with the pool when it is done
        for i, pk in enumerate(pks[name]):
            row: dict[str, Any] = {}
            if "status" in e.columns and e.statuses:
                row["status"] = _status(e.statuses, i)
            for col, states in e.extra_states.items():
                row[col] = _status(states, i)
            for col, cs in e.columns.items():
                if col in row:
                    continue
                if col == e.pk:
                    row[col] = pk
                    continue
                special = _special(e, col, row, i, now, rng)
                if special is not _NOT:
                    row[col] = special
                elif cs.foreign_key:
                    ref = by_table[cs.foreign_key.split(".")[0]]
                    row[col] = rng.choice(pks[ref.name])
                elif col in ("created_at", "updated_at") and col not in e.schemas:
                    row[col] = _iso(now - dt.timedelta(days=rng.randint(1, 60), hours=rng.randint(0, 9)))
                elif col in e.schemas and any(x.pk == col and x is not e for x in entities.values()) and \
                        col not in e.list_refs:
                    # a reference without a declared foreign key: a key of the entity it names
                    ref = next(x for x in entities.values() if x.pk == col and x is not e)
                    fit = [v for v in pks[ref.name] if valid(v, e.schemas[col])]
                    row[col] = rng.choice(fit) if fit else gen_value(e.schemas[col], col, rng)
                elif col in e.schemas:
                    s = e.schemas[col]
                    fk_ref = entities.get(e.list_refs.get(col, ""))
                    if fk_ref is not None:
                        row[col] = rng.sample(pks[fk_ref.name], k=min(2, len(pks[fk_ref.name])))
                    elif cs.type in ("text", "integer") and rng.random() < 0.8 and [
                            v for v in pool.get(col, ()) if v not in used.setdefault(col, set())]:
                        # the same field in another table: reuse its values (a watchlist holds known symbols)
                        v = rng.choice([v for v in pool[col] if v not in used[col]])
                        row[col] = v if valid(v, s) else gen_value(s, col, rng)
                    else:
                        row[col] = gen_value(s, col, rng)
                    alts = e.alt_schemas.get(col) or []
                    if alts and fk_ref is None and not all(valid(row[col], a) for a in alts):
                        # another tool takes this field with another schema: a value both accept
                        for cand in (gen_value(a, col, rng) for a in alts for _ in range(4)):
                            if valid(cand, s) and all(valid(cand, a) for a in alts):
                                row[col] = cand
                                break
                    if cs.type in ("text", "integer") and isinstance(row[col], (str, int)):
                        used.setdefault(col, set()).add(row[col])
                elif col.endswith("_id") and cs.type in ("text", "integer"):
                    # a reference without a declared foreign key: a key of the entity it names, when known
                    ref = next((x for x in entities.values() if x.pk == col), None)
                    row[col] = rng.choice(pks[ref.name]) if ref is not None else gen_value({"type": "string"}, col, rng)
                elif col == "name":
                    row[col] = gen_value({"type": "string"}, "title" if i % 2 else "name", rng)
                elif cs.type == "real":
                    row[col] = round(rng.uniform(1, 500), 2)
                elif cs.type == "integer":
                    row[col] = rng.randint(1, 50)
                elif cs.type == "boolean":
                    row[col] = rng.random() < 0.5
                else:
                    row[col] = gen_value({"type": "string"}, col, rng)
            for col, cs in e.columns.items():  # a list or object only in a JSON column, as text elsewhere
                if cs.type != "json" and isinstance(row.get(col), (list, dict)):
                    row[col] = json.dumps(row[col], sort_keys=True)
            out.append(row)
        rows[e.table] = out
        for col, vals in used.items():
            pool.setdefault(col, []).extend(v for v in sorted(vals, key=str) if v not in pool[col])
    return rows
