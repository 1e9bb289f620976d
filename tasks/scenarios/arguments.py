"""Grounded argument sampling: the one sampler of tool-call arguments (scenario walks, the validation suite).

Each parameter's value comes, in this order of preference, from:
  1. an earlier call's output (chaining): a value under the parameter's key in the most recent
     output that has one. A walk follows a dependency edge because data flows along it, so the
     agent must look the value up and the user need not know it (with the database first,
     chaining almost never happened);
  2. the database state: the row of the table the call is about (the table its synthesizer names in
     DomainSpec.report["plans"], else the table whose columns match most of the call's parameters;
     a row that agrees with the values chained so far), so that
     one call's values belong together (an order of that user); else any column named like the
     parameter (camelCase, role prefixes, plural stems and `id` all match), a key inside a JSON
     column, or a word of a name/title column for a search-like string. A state move takes a row
     in a state it may start from (DomainSpec.report["plans"][tool]["states"]). A read's values
     all fit its row, so it finds something: a query is a word of the row, an optional filter the
     row has no value for is left out, and chained attributes no row agrees with are dropped (the
     chained ids stay). Two parameters naming one key (from/to account) get two records. For a write, a non-key
     value with a format or enum comes from the schema half the time (a new email rather than
     someone else's); with `fresh_key`, the row's own key gets a value not in the table (a record
     created under a caller-given id);
  3. the parameter's JSON Schema (tasks.scenarios.values: enum, const, format, type, range).
Values are coerced to the schema's type when that is lossless (id 7 -> "7") and checked with
agentscaler.schemas. `sources[arg]` says where a value came from: "output" (the agent looks it
up) or "user" (the user must say it). The seed database is only read here (sqlite3, read-only).
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentscaler.naming import QUERY_NAMES, column_key, is_id_name, snake, strip_role
from envs.spec import DomainSpec, ToolSpec
from tasks.scenarios.values import gen_value, valid

_SEARCH_WORDS = ("query", "search", "keyword", "name", "title", "term", "text")
_NAME_COLUMNS = ("name", "title", "label")
MAX_VALUES = 500  # distinct values kept per column


def read_seed(spec: DomainSpec, seed_path: Path) -> dict[str, list[dict[str, Any]]]:
    """All rows of a seed database, json/boolean columns decoded (read-only, immutable open)."""
    conn = sqlite3.connect(f"file:{Path(seed_path).resolve()}?mode=ro&immutable=1", uri=True)
    try:
        out: dict[str, list[dict[str, Any]]] = {}
        for t in spec.tables:
            try:
                cur = conn.execute(f'SELECT * FROM "{t.name}"')
            except sqlite3.Error:
                continue
            cols = [d[0] for d in cur.description]
            types = {c.name: c.type for c in t.columns}
            rows = []
            for r in cur.fetchall():
                row = dict(zip(cols, r))
                for c, v in row.items():
                    if types.get(c) == "json" and isinstance(v, str):
                        row[c] = _json_or(v)
                    elif types.get(c) == "boolean" and v is not None:
                        row[c] = bool(v)
                rows.append(row)
            out[t.name] = rows
        return out
    finally:
        conn.close()


def _json_or(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _order(v: Any) -> tuple[int, str]:
    """A total order over mixed JSON values (numbers before text, as SQLite sorts them)."""
    return (0 if isinstance(v, (int, float)) and not isinstance(v, bool) else 1, json.dumps(v, sort_keys=True))


class StateView:
    """The seed database as grounding material: its rows, each column's values, name words."""

    def __init__(self, spec: DomainSpec, seed_path: Path | None = None,
                 rows: dict[str, list[dict[str, Any]]] | None = None, base: StateView | None = None):
        """base: a view whose tables this one shares where `rows` holds the very same list (a view
        of the state after one write: only the changed tables are indexed again)."""
        self.rows = rows if rows is not None else read_seed(spec, Path(seed_path or ""))
        self.pks = {t.name: t.primary_key[0] for t in spec.tables if t.primary_key}
        self.keys: set[str] = {c for t in spec.tables for c in t.primary_key} | \
            {c.name for t in spec.tables for c in t.columns if c.foreign_key}
        self.columns: dict[str, list[tuple[bool, list[Any]]]] = {}  # column -> [(is_pk, distinct values)]
        self.snake_columns: dict[str, str] = {}  # snake_case of a column -> the column
        self.nested: dict[str, list[Any]] = {}  # key inside json column values -> values
        self.name_words: dict[str, list[str]] = {}  # table -> words of its name/title columns
        self._memo: dict[tuple[str, str], tuple[Any, list[Any], str]] = {}  # grounded(): (schema, values, its JSON)
        self._table_columns: dict[str, set[str]] = {}
        self._score_memo: dict[tuple[str, tuple[str, ...], tuple[bool, ...]], dict[str, float]] = {}
        # the table a tool is about, when its synthesizer says (DomainSpec.report["plans"]): a search's
        # filters then come from one row of the table it searches, so the search finds that row
        plans = (spec.report or {}).get("plans") or {}
        self.hints: dict[str, str] = {n: str(p.get("anchor") or p.get("table")) for n, p in plans.items()
                                      if isinstance(p, dict) and (p.get("anchor") or p.get("table"))}
        # the states a state move may start from (a cancel acts on an active booking), and the tools
        # that create (their own key, when the caller gives it, must be new)
        self.states: dict[str, dict[str, list[Any]]] = {n: p["states"] for n, p in plans.items()
                                                         if isinstance(p, dict) and isinstance(p.get("states"), dict)}
        self.creates: set[str] = {n for n, p in plans.items() if isinstance(p, dict) and p.get("action") == "create"}
        self._values: dict[tuple[str, str], list[Any]] = {}  # (table, column) -> its distinct values
        for t in spec.tables:
            rows_t = self.rows.get(t.name, [])
            shared = base is not None and base.rows.get(t.name) is rows_t
            for c in t.columns:
                values = base._values.get((t.name, c.name)) if shared else None  # type: ignore[union-attr]
                if values is None:
                    values = _distinct(rows_t, c.name)
                self._values[(t.name, c.name)] = values
                if c.type == "json":
                    for v in values:  # keys inside JSON values (an address's city, zip) ground too
                        found: dict[str, list[Any]] = {}
                        _nested(v, found, 0)
                        for k, vs in found.items():
                            bucket = self.nested.setdefault(k, [])
                            bucket.extend(x for x in vs if len(bucket) < MAX_VALUES and x not in bucket)
                if values:
                    self.columns.setdefault(c.name, []).append((c.name in t.primary_key, values))
                    self.snake_columns.setdefault(snake(c.name), c.name)
                if c.type == "text" and any(c.name == n or c.name.endswith("_" + n) for n in _NAME_COLUMNS):
                    words = self.name_words.setdefault(t.name, [])
                    words.extend(w for v in values for w in str(v).split() if len(w) > 2)
        self.name_words = {t: sorted(set(w)) for t, w in self.name_words.items()}

    def _snake_columns(self, table: str) -> set[str]:
        """snake_case of the table's columns (of its first row: all its rows have the same)."""
        cols = self._table_columns.get(table)
        if cols is None:
            cols = self._table_columns[table] = {snake(c) for c in self.rows[table][0]}
        return cols

    def column(self, param: str) -> str | None:
        """The column a parameter names: itself, or a derived key (camelCase, role prefix, plural stem)."""
        for k in param_keys(param):
            if k in self.columns:
                return k
            if k in self.snake_columns:
                return self.snake_columns[k]
        return None

    def values_for(self, param: str) -> list[Any]:
        """Values of the column the parameter names (a table where it is the key first), or of a JSON key."""
        col = self.column(param)
        if col is None:
            return sorted(self.nested.get(param, []), key=_order)
        return sorted(self.columns[col], key=lambda e: not e[0])[0][1]

    def grounded(self, tool: ToolSpec, param: str, schema: dict[str, Any]) -> list[Any]:
        """Schema-valid database values for a parameter (memoized: the seed does not change)."""
        key = (tool.name, param)
        memo = self._memo.get(key)
        if memo is not None and memo[0] is schema:  # the same schema object: no need to serialize it
            return memo[1]
        text = json.dumps(schema, sort_keys=True)
        if memo is not None and memo[2] == text:
            self._memo[key] = (schema, memo[1], text)
            return memo[1]
        hit = [c for c in (coerce(v, schema) for v in self.values_for(param)) if valid(c, schema)]
        if not hit and "string" in _types(schema) and not schema.get("enum") and not schema.get("format") \
                and any(w in param.lower() for w in _SEARCH_WORDS):
            hit = [w for w in self.words_for(tool) if valid(w, schema)]
        self._memo[key] = (schema, hit, text)  # keeps the schema alive: its identity stays its own
        return hit

    def words_for(self, tool: ToolSpec) -> list[str]:
        """Words of name/title columns of the tables the tool talks about (all tables if none is named)."""
        text = f"{tool.name} {tool.description}".lower()
        hits = [t for t in self.name_words if t.lower().rstrip("s") in text]
        return sorted({w for t in (hits or list(self.name_words)) for w in self.name_words[t]})

    def anchor(self, tool: ToolSpec, params: list[str], required: set[str], chained: dict[str, Any],
               rng: random.Random) -> tuple[str | None, dict[str, Any], bool]:
        """(table, row, agreed): the row a call is about. The table its plan names, else the table
        whose columns match most parameters (a required one counts double, an exact name a little
        more; the table named in the tool's name breaks ties); among its rows one that agrees with
        the values chained so far (`agreed` says whether one did) and, for a state move, one in a
        state the move may start from."""
        tool_name = snake(tool.name)
        best: tuple[float, str] | None = None
        hint = self.hints.get(tool.name)
        scores = self._scores(tool_name, params, required)
        for table, score in scores.items():
            if score > 0 and (best is None or score > best[0] or (score == best[0] and rng.random() < 0.5)):
                best = (score, table)
        if hint in self.rows and self.rows[hint] and (best is None or scores.get(hint, 0) > 0):
            best = (scores.get(hint, 0.0), hint)
        if best is None:  # no column matched: the table the tool is named after
            named = [t for t, r in sorted(self.rows.items()) if r and (t[:-1] if t.endswith("s") else t) in tool_name]
            if not named:
                return None, {}, not chained
            best = (0.0, max(named, key=len))
        trows = self.rows[best[1]]
        wanted = _row_columns(trows[0], chained).items()  # a table's rows share their columns (read_seed)
        agree = [r for r in trows if all(_same(r.get(c), v) for c, v in wanted)] if wanted else trows
        states = self.states.get(tool.name, {}).items()
        legal = [r for r in (agree or trows) if all(r.get(c) in ok for c, ok in states)] if states else agree
        return best[1], rng.choice(legal or agree or trows), bool(agree)

    def _scores(self, tool_name: str, params: list[str], required: set[str]) -> dict[str, float]:
        """anchor()'s score of each table with rows for these parameters (memoized: the same tool and
        parameters recur in every try and walk; the rows of a view do not change)."""
        key = (tool_name, tuple(params), tuple(p in required for p in params))
        scores = self._score_memo.get(key)
        if scores is not None:
            return scores
        scores = {}
        for table, trows in sorted(self.rows.items()):
            if not trows:
                continue
            cols = self._snake_columns(table)
            score = 0.0
            for p in params:
                keys = param_keys(p)
                if any(k in cols for k in keys):
                    score += (2.0 if p in required else 1.0) * (1.0 if keys[0] in cols else 0.9)
                elif snake(p) == "id" and any(c.endswith("_id") for c in cols):
                    score += 1.5
            stem = table[:-1] if table.endswith("s") else table
            if score > 0 and stem and stem in tool_name:
                score += 0.5
            scores[table] = score
        self._score_memo[key] = scores
        return scores


def _row_columns(row: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """{column of the row: value} for the parameters among `values` that name a column of the row."""
    cols = {snake(c): c for c in row}
    out = {}
    for p, v in values.items():
        c = next((cols[k] for k in param_keys(p) if k in cols), None)
        if c is not None:
            out[c] = v
    return out


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a) == str(b)


@lru_cache(maxsize=1 << 14)  # the same parameters recur in every call of every walk
def param_keys(param: str) -> tuple[str, ...]:
    """Column names a parameter may match, most specific first: userId -> user_id, max_price ->
    price, order_ids -> order_id, restaurantsId -> restaurant_id, source_account_id -> account_id."""
    s = snake(param) or param
    keys = [s]
    for k in (column_key(param), re.sub(r"_(uuid|ids)$", "_id", s)):
        if k and k not in keys:
            keys.append(k)
    m = re.match(r"^(.*?)(ies|s)_(id|ids|uuid)$", s)
    if m and m.group(1) and not m.group(1).endswith("s"):
        k = m.group(1) + ("y" if m.group(2) == "ies" else "") + "_id"
        if k not in keys:
            keys.append(k)
    if s.endswith(("_id", "_uuid", "_ids")):
        base = strip_role(s)
        if base != s:
            k = re.sub(r"_(uuid|ids)$", "_id", base)
            if k not in keys:
                keys.append(k)
    return tuple(keys)


def _distinct(rows: list[dict[str, Any]], column: str) -> list[Any]:
    """A column's distinct non-null values in _order, at most MAX_VALUES."""
    values = sorted({json.dumps(r.get(column), sort_keys=True) for r in rows if r.get(column) is not None})
    return sorted((json.loads(v) for v in values), key=_order)[:MAX_VALUES]


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


def _chain(outputs: list[Any], names: list[str], subs: dict[str, dict[str, Any]],
           rng: random.Random) -> dict[str, Any]:
    """Values for `names` from earlier outputs: each from the most recent output that has its key (if
    valid there); names answered by one output take their values from one record of it when a
    record holds them all (an order and its own user, not another order's)."""
    found: dict[int, dict[str, list[Any]]] = {}
    for name in names:
        for i in range(len(outputs) - 1, -1, -1):
            values = output_values([outputs[i]], name)
            if values:
                good = [c for c in (coerce(v, subs[name]) for v in values) if valid(c, subs[name])]
                if good:
                    found.setdefault(i, {})[name] = good
                break
    out: dict[str, Any] = {}
    for i, group in sorted(found.items()):
        records = []
        for rec in _records(outputs[i], 0):
            vals = {n: coerce(rec[n], subs[n]) for n in group if isinstance(rec.get(n), (str, int, float, bool))}
            if len(vals) == len(group) and all(v in group[n] for n, v in vals.items()):
                records.append(vals)
        if len(group) > 1 and records:
            out.update(rng.choice(records))
        else:
            out.update({n: rng.choice(vs) for n, vs in group.items()})
    return out


def _records(obj: Any, depth: int) -> list[dict[str, Any]]:
    """The dicts of an output, nested ones too (as far as output_values looks)."""
    if depth > 4:
        return []
    if isinstance(obj, dict):
        return [obj] + [r for v in obj.values() if isinstance(v, (dict, list)) for r in _records(v, depth + 1)]
    if isinstance(obj, list):
        return [r for v in obj[:50] for r in _records(v, depth + 1)]
    return []


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


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, list):
        return [x for x in t if x != "null"] or ["null"]
    if t:
        return [t]
    if "enum" in schema or "const" in schema:
        return []
    return ["string"]


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """Make a grounded value fit the schema's type when that is lossless (id 7 -> "7", "3" -> 3, 5 -> [5])."""
    types = _types(schema)
    if not types or isinstance(value, bool) and "boolean" in types:
        return value
    t = types[0]
    try:
        if t == "array" and value is not None:
            items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
            return [coerce(v, items) for v in (value if isinstance(value, list) else [value])]
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
                     optional_prob: float = 0.3, fresh_key: bool | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """(arguments, sources) for one call of `tool`, in the module docstring's order of preference.
    fresh_key: give the row's own key a new value (default: when the tool's plan says it creates)."""
    if fresh_key is None:
        fresh_key = tool.name in state.creates
    schema = tool.parameters or {}
    props: dict[str, Any] = schema.get("properties", {}) or {}
    required = set(schema.get("required", []) or [])
    chosen = [n for n in sorted(props) if n in required or rng.random() < optional_prob]
    subs = {n: props[n] if isinstance(props[n], dict) else {} for n in chosen}
    args: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, value in _chain(outputs, chosen, subs, rng).items():  # 1. chaining
        args[name], sources[name] = value, "output"
    table, row, agreed = state.anchor(tool, chosen, required, args, rng)  # 2. the database
    if not agreed and tool.kind == "read" and any(not is_id_name(n) for n in args):
        # chained attributes no row agrees with would make a lookup that finds nothing: keep the
        # chained ids, take the other values from one row
        args = {n: v for n, v in args.items() if is_id_name(n)}
        sources = {n: "output" for n in args}
        table, row, agreed = state.anchor(tool, chosen, required, args, rng)
    row_cols = {snake(c): c for c in row}
    for bare in ("id", "uuid", "ids"):  # a bare `id` (`uuid`, `ids`) parameter names the row's own key
        if table and bare not in row_cols:
            row_cols[bare] = state.pks.get(table) or next((c for c in row if snake(c).endswith("_id")), "")
    fresh_col = state.pks.get(table or "") if fresh_key else None
    used_cols: dict[str, list[Any]] = {}  # key column -> values given to earlier parameters of this call
    for name in chosen:
        if name in args:
            continue
        ps = subs[name]
        col = next((row_cols[k] for k in param_keys(name) if row_cols.get(k)), None)
        if fresh_col is not None and col == fresh_col and "array" not in _types(ps):
            value = _fresh(state.rows[table or ""], fresh_col, ps, name, rng)
            if value is not None:
                args[name], sources[name] = value, "user"
                continue
        if tool.kind == "read" and row and name not in required and col is not None and row.get(col) is None:
            continue  # an optional filter the row has no value for would only find nothing
        if tool.kind == "read" and row and snake(name) in QUERY_NAMES and "string" in _types(ps):
            words = _row_words(row, state.keys)
            if words:
                args[name], sources[name] = rng.choice(words), "user"  # a word of the row: the search finds it
                continue
        from_row = coerce(row.get(col), ps) if col is not None and row.get(col) is not None else None
        from_db = [from_row] if from_row is not None and valid(from_row, ps) else state.grounded(tool, name, ps)
        if col is not None and col in used_cols and col in state.keys:
            # two parameters naming one key (from_account_id, to_account_id): two different records
            from_db = [v for v in state.grounded(tool, name, ps) if v not in used_cols[col]] or from_db
        if tool.kind == "write" and name not in state.keys and (ps.get("format") or ps.get("enum")) \
                and rng.random() < 0.5:
            from_db = []  # a new value to set (an email, a status): from the schema half the time
        if from_db:
            args[name], sources[name] = rng.choice(from_db), "user"
            if col is not None:
                used_cols.setdefault(col, []).append(args[name])
            continue
        value = _from_schema(ps, name, rng)  # 3. the schema
        if value is _NONE:
            if name in required:
                value = gen_value(ps, name, rng)  # the schema cannot be satisfied: a required value anyway
            else:
                continue  # an unsatisfiable optional parameter (a corpus defect) is left out
        args[name], sources[name] = value, "user"
    return args, sources


_NONE = object()


def _row_words(row: dict[str, Any], keys: set[str]) -> list[str]:
    """Words of a row's text values (not its keys), for a search query that must find the row."""
    out: list[str] = []
    for c, v in row.items():
        if c in keys or not isinstance(v, str) or v.startswith(("{", "[")):
            continue
        out.extend(w for w in re.findall(r"[A-Za-z]{3,}", v) if w not in out)
    return sorted(out)


def _from_schema(schema: dict[str, Any], name: str, rng: random.Random) -> Any:
    """A schema-valid value (a few tries; then the default or an example), or _NONE."""
    for _ in range(5):
        v = gen_value(schema, name, rng)
        if valid(v, schema):
            return v
    for alt in ([schema["default"]] if "default" in schema else []) + list(schema.get("examples") or []):
        if valid(alt, schema):
            return alt
    return _NONE


def _fresh(rows: list[dict[str, Any]], col: str, schema: dict[str, Any], name: str, rng: random.Random) -> Any:
    """A value for the key column `col` that no row has (the next integer for integer keys)."""
    keys = [r.get(col) for r in rows]
    taken = {str(x) for x in keys}
    ints = [x for x in keys if isinstance(x, int) and not isinstance(x, bool)]
    for k in range(10):
        v = coerce(max(ints) + 1 + k, schema) if ints and len(ints) == len(keys) else gen_value(schema, name, rng)
        if str(v) not in taken and valid(v, schema):
            return v
    return None
