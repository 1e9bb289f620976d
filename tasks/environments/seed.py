"""Seed rows of a planned domain: consistent foreign keys, varied values valid against the parameter schemas.

The same value generator grounds scenario arguments (tasks.scenarios.values), so seed values are
valid arguments by construction.
"""

from __future__ import annotations

import random
from typing import Any

from agentscaler.schemas import is_valid
from tasks.environments.plan import Entity
from tasks.scenarios.values import gen_value


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
            if v not in out and is_valid(v, s):
                out.append(v)
            if len(out) == n:
                break
        if out:
            return out
    if e.pk_type == "integer":
        return list(range(1, n + 1))
    return [f"{e.prefix}{i}" for i in range(1, n + 1)]


def seed_rows(entities: dict[str, Entity], rng: random.Random, clock: str) -> dict[str, list[dict[str, Any]]]:
    pks = {name: _pk_values(e, rng.randint(4, 8), rng) for name, e in sorted(entities.items())}
    by_table = {e.table: e for e in entities.values()}
    rows: dict[str, list[dict[str, Any]]] = {}
    pool: dict[str, list[Any]] = {}  # column name -> values seeded so far, shared across tables
    for name, e in sorted(entities.items()):
        out = []
        used: dict[str, set[Any]] = {}  # values of this table, shared with the pool when it is done
        for i, pk in enumerate(pks[name]):
            row: dict[str, Any] = {}
            for col, cs in e.columns.items():
                if col == e.pk:
                    row[col] = pk
                elif cs.foreign_key:
                    ref = by_table[cs.foreign_key.split(".")[0]]
                    row[col] = rng.choice(pks[ref.name])
                elif col == "status" and e.statuses:
                    row[col] = e.statuses[i % len(e.statuses)] if i < len(e.statuses) else rng.choice(e.statuses)
                elif col in ("created_at", "updated_at") and col not in e.schemas:
                    row[col] = f"2024-0{rng.randint(1, 4)}-{rng.randint(10, 28)}T{rng.randint(8, 18):02d}:00:00"
                elif col in e.schemas:
                    s = e.schemas[col]
                    fk_ref = entities.get(e.list_refs.get(col, ""))
                    if fk_ref is not None:
                        row[col] = rng.sample(pks[fk_ref.name], k=min(2, len(pks[fk_ref.name])))
                    elif cs.type in ("text", "integer") and rng.random() < 0.8 and [
                            v for v in pool.get(col, ()) if v not in used.setdefault(col, set())]:
                        # the same field in another table: reuse its values (a watchlist holds known symbols)
                        v = rng.choice([v for v in pool[col] if v not in used[col]])
                        row[col] = v if is_valid(v, s) else gen_value(s, col, rng)
                    else:
                        row[col] = gen_value(s, col, rng)
                    if cs.type in ("text", "integer") and isinstance(row[col], (str, int)):
                        used.setdefault(col, set()).add(row[col])
                elif col == "name":
                    row[col] = gen_value({"type": "string"}, "title" if i % 2 else "name", rng)
                elif cs.type == "real":
                    row[col] = round(rng.uniform(1, 500), 2)
                else:
                    row[col] = gen_value({"type": "string"}, col, rng)
            out.append(row)
        rows[e.table] = out
        for col, vals in used.items():
            pool.setdefault(col, []).extend(v for v in sorted(vals, key=str) if v not in pool[col])
    return rows
