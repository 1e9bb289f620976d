"""Grounded argument sampling: arguments for a tool call, valid against its JSON Schema."""

from __future__ import annotations

import json
import random
import re
import sqlite3
from pathlib import Path
from typing import Any

from agentscaler.naming import QUERY_NAMES, ROLE_PREFIXES, column_key, snake
from agentscaler.schemas import is_valid
from envs.spec import DomainSpec, ToolSpec
from tasks.scenarios.values import _schema_type, _types, gen_value, sample_from_schema

_SEARCH_WORDS = ("query", "search", "keyword", "name", "title", "term", "text")
_NAME_COLUMNS = ("name", "title", "label")


class StateView:
    """Column values of the seed database, read-only, to ground arguments in existing data."""

    def __init__(self, spec: DomainSpec, seed_path: Path, max_values: int = 500):
        self.columns: dict[str, list[tuple[bool, list[Any]]]] = {}  # column -> [(is_pk, values)]
        self.keys: set[str] = {c for t in spec.tables for c in t.primary_key} | \
            {c.name for t in spec.tables for c in t.columns if c.foreign_key}
        self.name_words: dict[str, list[str]] = {}  # table -> words of its name/title columns
        self._memo: dict[tuple[str, str, str], list[Any]] = {}
        self.nested: dict[str, list[Any]] = {}  # key inside json column values -> values
        conn = sqlite3.connect(f"file:{Path(seed_path).resolve()}?mode=ro", uri=True)
        try:
            for t in spec.tables:
                for c in t.columns:
                    try:
                        rows = conn.execute(f'SELECT DISTINCT "{c.name}" FROM "{t.name}" WHERE "{c.name}" IS NOT NULL '
                                            f'ORDER BY 1 LIMIT {int(max_values)}').fetchall()
                    except sqlite3.Error:
                        continue
                    values = [r[0] for r in rows]
                    if c.type == "json":
                        values = [_json_or(v) for v in values]
                        for v in values:  # keys inside JSON values (an address's city, zip) ground too
                            found: dict[str, list[Any]] = {}
                            _nested(v, found, 0)
                            for k, vs in found.items():
                                bucket = self.nested.setdefault(k, [])
                                bucket.extend(x for x in vs if len(bucket) < max_values and x not in bucket)
                    if c.type == "boolean":
                        values = [bool(v) for v in values]
                    if values:
                        self.columns.setdefault(c.name, []).append((c.name in t.primary_key, values))
                    if c.type == "text" and any(c.name == n or c.name.endswith("_" + n) for n in _NAME_COLUMNS):
                        words = self.name_words.setdefault(t.name, [])
                        words.extend(w for v in values for w in str(v).split() if len(w) > 2)
        finally:
            conn.close()
        self.name_words = {t: sorted(set(w)) for t, w in self.name_words.items()}

    def grounded(self, tool: ToolSpec, param: str, schema: dict[str, Any]) -> list[Any]:
        """Schema-valid database values for a parameter (memoized: the seed does not change)."""
        key = (tool.name, param, json.dumps(schema, sort_keys=True))
        hit = self._memo.get(key)
        if hit is None:
            hit = [c for c in (coerce(v, schema) for v in self.values_for(param)) if is_valid(c, schema)]
            if not hit and "string" in _types(schema) and not schema.get("enum") and not schema.get("format") \
                    and any(w in param.lower() for w in _SEARCH_WORDS):
                hit = [w for w in self.words_for(tool) if is_valid(w, schema)]
            self._memo[key] = hit
        return hit

    def words_for(self, tool: ToolSpec) -> list[str]:
        """Words of name/title columns of the tables the tool talks about (all tables if none is named)."""
        text = f"{tool.name} {tool.description}".lower()
        hits = [t for t in self.name_words if t.lower().rstrip("s") in text]
        return sorted({w for t in (hits or list(self.name_words)) for w in self.name_words[t]})

    def values_for(self, param: str) -> list[Any]:
        """Values of the column named like the parameter; a table where it is the key comes first."""
        entries = self.columns.get(param, [])
        entries = sorted(entries, key=lambda e: not e[0])
        return entries[0][1] if entries else sorted(self.nested.get(param, []), key=repr)


def _json_or(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _nested(obj: Any, found: dict[str, list[Any]], depth: int) -> None:
    if depth > 3:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (str, int, float, bool)):
                found.setdefault(k, []).append(v)
            else:
                _nested(v, found, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:20]:
            _nested(v, found, depth + 1)


def output_values(outputs: list[Any], key: str) -> list[Any]:
    """Scalar values under `key` in the most recent output that has any (dicts, lists of dicts, nested)."""
    for out in reversed(outputs):
        found: list[Any] = []
        _collect(out, key, found, 0)
        if found:
            seen: list[Any] = []
            for v in found:
                if v not in seen:
                    seen.append(v)
            return seen
    return []


def _collect(obj: Any, key: str, found: list[Any], depth: int) -> None:
    if depth > 4:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, (str, int, float, bool)):
                found.append(v)
            elif isinstance(v, (dict, list)):
                _collect(v, key, found, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:50]:
            _collect(v, key, found, depth + 1)


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """Make a grounded value fit the schema type when that is lossless (id 7 -> "7", "3" -> 3)."""
    types = _types(schema)
    if not types or isinstance(value, bool) and "boolean" in types:
        return value
    t = types[0]
    try:
        if t == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if t == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        if t == "integer" and isinstance(value, float) and value.is_integer():
            return int(value)
        if t == "number" and isinstance(value, str):
            return float(value)
    except ValueError:
        return value
    return value


def ground_arguments(tool: ToolSpec, state: StateView, outputs: list[Any], rng: random.Random,
                     optional_prob: float = 0.3, clock: str = "2024-05-15T15:00:00"
                     ) -> tuple[dict[str, Any], dict[str, str]]:
    """(arguments, sources): each value from an earlier output, the database state, or the schema.

    `sources[arg]` is "output" (chained: the agent looks it up) or "user" (the user must say it;
    from the database state or the schema).
    """
    schema = tool.parameters or {}
    props: dict[str, Any] = schema.get("properties", {}) or {}
    required = set(schema.get("required", []) or [])
    args: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in sorted(props):
        ps = props[name] if isinstance(props[name], dict) else {}
        if name not in required and rng.random() >= optional_prob:
            continue
        chained = [c for c in (coerce(v, ps) for v in output_values(outputs, name)) if is_valid(c, ps)]
        if chained:
            args[name], sources[name] = rng.choice(chained), "output"
            continue
        from_db = state.grounded(tool, name, ps)
        if tool.kind == "write" and name not in state.keys and (ps.get("format") or ps.get("enum")) \
                and rng.random() < 0.5:
            from_db = []  # a new value to set (an email, a status): from the schema half the time
        if from_db:
            args[name], sources[name] = rng.choice(from_db), "user"
            continue
        args[name], sources[name] = sample_from_schema(ps, rng, clock), "user"
    return args, sources


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    """Fit a database/output value to the parameter type where it is lossless enough."""
    t = _schema_type(schema)
    if value is None:
        return None
    if t == "array" and not isinstance(value, list):
        value = [value]
    if t == "array" and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"]) for v in value]
    if t == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if t == "integer" and isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if t == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if t == "number" and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _walk_outputs(obj: Any, out: dict[str, list[Any]], depth: int = 0) -> None:
    if depth > 4:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and not isinstance(v, (dict, list)):
                out.setdefault(column_key(k), []).append(v)
            _walk_outputs(v, out, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:50]:
            _walk_outputs(v, out, depth + 1)


def _rows_of(rows: Any) -> dict[str, list[dict[str, Any]]]:
    if rows is None:
        return {}
    if isinstance(rows, dict):
        return {k: list(v) for k, v in rows.items() if isinstance(v, (list, tuple))}
    raise TypeError("rows must be a dict {table: [row dict, ...]}")


def _param_keys(pname: str) -> list[str]:
    """Column names a parameter may match, most specific first (`id` also matches any *_id pk)."""
    s = snake(pname)
    keys = [s]
    for k in (column_key(pname), re.sub(r"_(uuid|ids)$", "_id", s)):
        if k not in keys:
            keys.append(k)
    m = re.match(r"^(.*?)(ies|s)_(id|ids|uuid)$", s)  # restaurantsId also matches restaurant_id
    if m and m.group(1) and not m.group(1).endswith("s"):
        k = m.group(1) + ("y" if m.group(2) == "ies" else "") + "_id"
        if k not in keys:
            keys.append(k)
    if s.endswith(("_id", "_uuid", "_ids")):  # source_account_id also matches account_id
        for rp in ROLE_PREFIXES:
            if s.startswith(rp):
                k = re.sub(r"_(uuid|ids)$", "_id", s[len(rp):])
                if k not in keys:
                    keys.append(k)
                break
    return keys


def _col_index(row: dict[str, Any]) -> dict[str, str]:
    return {snake(c): c for c in row}


def sample_arguments(tool: Any, rows: Any, rng: random.Random, prior_outputs: list[Any] | None = None,
                     optional_p: float = 0.5, fresh_key: bool = False) -> dict[str, Any]:
    """Arguments for `tool` (a ToolSpec/Tool or its parameters schema) grounded in `rows`.

    `rows` is {table: [row dict]} (a state view). The result validates against the tool's
    parameter schema whenever the schema can be satisfied; values that do not fit are
    regenerated from the schema. With `fresh_key`, a parameter naming the anchor table's
    primary key gets a new value not in the table (to create a record under a caller-given id).
    """
    schema = tool if isinstance(tool, dict) else tool.parameters
    props: dict[str, Any] = schema.get("properties") or {}
    required = [r for r in schema.get("required", []) if r in props]
    tables = _rows_of(rows)
    tool_name = snake(getattr(tool, "name", "") or "")
    chosen = [p for p in props if p in required or rng.random() < optional_p]

    # 1. the anchor: one row of the table whose columns match most chosen parameters
    best: tuple[float, str] | None = None
    for tname, trows in sorted(tables.items()):
        if not trows:
            continue
        cols = _col_index(trows[0])
        score = 0.0
        for p in chosen:
            keys = _param_keys(p)
            if any(k in cols for k in keys):  # an exact column name counts a little more than a derived one
                score += (2.0 if p in required else 1.0) * (1.0 if keys[0] in cols else 0.9)
            elif snake(p) == "id" and tname.rstrip("s") and any(c.endswith("_id") for c in cols):
                score += 1.5
        stem = tname[:-1] if tname.endswith("s") else tname
        if score > 0 and stem and stem in tool_name:
            score += 0.5
        if score > 0 and (best is None or score > best[0] or (score == best[0] and rng.random() < 0.5)):
            best = (score, tname)
    if best is None and tool_name:  # no column matched: the table the tool is named after
        named = [t for t, r in sorted(tables.items()) if r and (t[:-1] if t.endswith("s") else t) in tool_name]
        if named:
            best = (0.0, max(named, key=len))
    anchor: dict[str, Any] = {}
    anchor_cols: dict[str, str] = {}
    if best is not None:
        anchor = rng.choice(tables[best[1]])
        anchor_cols = _col_index(anchor)
        pk_guess = next((c for c in anchor if snake(c).endswith("_id")), None)
        if pk_guess:
            anchor_cols.setdefault("id", pk_guess)

    fresh_col = next(iter(anchor), None) if fresh_key and anchor else None  # the anchor table's key column
    outputs: dict[str, list[Any]] = {}
    for o in prior_outputs or []:
        _walk_outputs(o, outputs)

    args: dict[str, Any] = {}
    for p in chosen:
        sub = props[p] if isinstance(props[p], dict) else {}
        candidates: list[Any] = []
        keys = _param_keys(p)
        if fresh_col is not None and anchor_cols.get(keys[0]) == fresh_col:
            taken = {r.get(fresh_col) for r in tables[best[1]]} if best else set()
            ints = [x for x in taken if isinstance(x, int) and not isinstance(x, bool)]
            for k in range(10):
                if ints and len(ints) == len(taken):  # integer keys: the next free number, typed for the schema
                    v = _coerce(max(ints) + 1 + k, sub)
                else:
                    v = gen_value(sub, p, rng)
                if v not in taken and str(v) not in {str(x) for x in taken} and is_valid(v, sub):
                    args[p] = v
                    break
            if p in args:
                continue
        for k in keys:  # database: the anchor row, then any row of any table with that column
            if k in anchor_cols and anchor.get(anchor_cols[k]) is not None:
                candidates.append(anchor[anchor_cols[k]])
                break
        if not candidates:
            for tname, trows in sorted(tables.items()):
                if trows:
                    cols = _col_index(trows[0])
                    hit = next((cols[k] for k in keys if k in cols), None)
                    if hit is not None:
                        vals = [r[hit] for r in trows if r.get(hit) is not None]
                        if vals:
                            candidates.append(rng.choice(vals))
                            break
        for k in keys:  # earlier outputs
            if outputs.get(k):
                candidates.append(rng.choice(outputs[k]))
                break
        if snake(p) in QUERY_NAMES and anchor and not candidates:  # a word of the anchor row's text
            words = [w for c, v in sorted(anchor.items()) if isinstance(v, str) and not snake(c).endswith("_id")
                     for w in v.split() if len(w) > 2]
            if words:
                candidates.append(rng.choice(words))
        value: Any = None
        found = False
        for c in candidates:
            c = _coerce(c, sub)
            if is_valid(c, sub):
                value, found = c, True
                break
        if not found:
            value = gen_value(sub, p, rng)
            if not is_valid(value, sub):  # e.g. a pattern we cannot generate: try the default/examples
                for alt in ([sub["default"]] if "default" in sub else []) + list(sub.get("examples") or []):
                    if is_valid(alt, sub):
                        value = alt
                        break
            if not is_valid(value, sub):
                for _ in range(4):
                    value = gen_value(sub, p, rng)
                    if is_valid(value, sub):
                        break
                else:
                    if p not in required:  # an unsatisfiable optional parameter (corpus defect): leave it out
                        continue
        args[p] = value
    return args
