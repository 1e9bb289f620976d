"""Grounded argument sampling: arguments for a tool call, valid against its JSON Schema.

Values come, in order of preference, from the database state (one coherent row of the table
whose columns best match the parameter names), then from earlier tool outputs, then from the
schema itself (enum, const, format, type, range) with realistic strings chosen by name.
The same value generator fills seed databases (tasks.environments.rules), so seed values are valid
arguments by construction.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

from agentscaler.naming import QUERY_NAMES, ROLE_PREFIXES, column_key, snake
from agentscaler.schemas import is_valid

_FIRST = ["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances", "Edsger",
          "Radia", "Donald", "Katherine", "John", "Hedy", "Tim"]
_LAST = ["Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie", "Allen",
         "Dijkstra", "Perlman", "Knuth", "Johnson", "McCarthy", "Lamarr", "Berners-Lee"]
_CITIES = ["Paris", "Berlin", "Tokyo", "Lagos", "Lima", "Austin", "Oslo", "Seoul", "Nairobi", "Denver"]
_COUNTRIES = ["France", "Germany", "Japan", "Nigeria", "Peru", "USA", "Norway", "Korea", "Kenya", "Canada"]
_WORDS = ["alpha", "blue", "cedar", "delta", "ember", "falcon", "garnet", "harbor", "iris", "juniper",
          "kestrel", "lumen", "maple", "nova", "onyx", "pine", "quartz", "river", "sierra", "tango"]
_NOUNS = ["Mug", "Lamp", "Notebook", "Chair", "Backpack", "Kettle", "Monitor", "Jacket", "Bottle", "Speaker"]
_CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF"]
_LANGS = ["en", "fr", "de", "es", "ja"]


# ---------------------------------------------------------------------------------------------
# schema-driven generation
# ---------------------------------------------------------------------------------------------
def _schema_type(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "null")
    if t is None:
        if "properties" in schema:
            return "object"
        if "items" in schema:
            return "array"
        return "string"
    return t


def _string_for(name: str, schema: dict[str, Any], rng: random.Random) -> str:
    fmt = schema.get("format")
    n = snake(name)
    if fmt == "email" or "email" in n:
        return f"{rng.choice(_FIRST).lower()}.{rng.choice(_LAST).lower()}{rng.randint(1, 99)}@example.com"
    if fmt == "date-time" or n.endswith(("_at", "datetime", "timestamp")):
        d = dt.datetime(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 365), minutes=rng.randint(0, 1439))
        return d.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if fmt == "date-time" else "")
    if fmt == "date" or n.endswith("date") or n in ("day", "birthday", "dob"):
        return (dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 365))).isoformat()
    if fmt == "time" or n.endswith("_time") or n == "time":
        return f"{rng.randint(0, 23):02d}:{rng.choice([0, 15, 30, 45]):02d}:00"
    if fmt in ("uri", "url") or "url" in n or "link" in n or "website" in n:
        return f"https://example.com/{rng.choice(_WORDS)}/{rng.randint(1, 999)}"
    if fmt == "uuid":
        return "%08x-%04x-4%03x-8%03x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                               rng.getrandbits(12), rng.getrandbits(48))
    if fmt == "ipv4" or n in ("ip", "ip_address"):
        return ".".join(str(rng.randint(1, 254)) for _ in range(4))
    if "phone" in n:
        return f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if n.endswith("_id") or n == "id" or n.endswith("_uuid"):
        return f"{n.split('_')[0][:3]}_{rng.randint(100, 999)}"
    if n in ("first_name", "firstname", "given_name"):
        return rng.choice(_FIRST)
    if n in ("last_name", "lastname", "surname", "family_name"):
        return rng.choice(_LAST)
    if n in ("name", "full_name", "username", "user_name", "author", "owner", "customer", "receiver",
             "recipient", "sender", "contact", "person"):
        return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    if "city" in n or "location" in n or n in ("origin", "destination", "place", "region"):
        return rng.choice(_CITIES)
    if "country" in n:
        return rng.choice(_COUNTRIES)
    if "currency" in n:
        return rng.choice(_CURRENCIES)
    if n in ("lang", "language", "locale"):
        return rng.choice(_LANGS)
    if n in ("title", "product", "product_name", "item", "item_name", "product_title"):
        return f"{rng.choice(_WORDS).title()} {rng.choice(_NOUNS)}"
    if "password" in n:
        return f"pw-{rng.choice(_WORDS)}-{rng.randint(1000, 9999)}"
    if n in ("description", "text", "message", "content", "body", "comment", "note", "notes", "query",
             "keyword", "keywords", "search", "q", "prompt", "reason", "subject", "summary"):
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
    return f"{rng.choice(_WORDS)}-{rng.randint(1, 99)}"


def _fit_length(s: str, schema: dict[str, Any]) -> str:
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if isinstance(hi, int) and len(s) > hi:
        s = s[:hi]
    if isinstance(lo, int) and len(s) < lo:
        s = s + "x" * (lo - len(s))
    return s


def _number(schema: dict[str, Any], rng: random.Random, integer: bool, name: str) -> int | float:
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(xlo, (int, float)) and not isinstance(xlo, bool):
        lo = xlo + (1 if integer else 1e-3) if lo is None else max(lo, xlo + (1 if integer else 1e-3))
    if isinstance(xhi, (int, float)) and not isinstance(xhi, bool):
        hi = xhi - (1 if integer else 1e-3) if hi is None else min(hi, xhi - (1 if integer else 1e-3))
    n = snake(name)
    if lo is None and hi is None:
        if any(k in n for k in ("year",)):
            lo, hi = 1990, 2024
        elif any(k in n for k in ("lat",)):
            lo, hi = -80, 80
        elif any(k in n for k in ("lon", "lng")):
            lo, hi = -170, 170
        elif any(k in n for k in ("limit", "count", "num", "quantity", "size", "top", "page")):
            lo, hi = 1, 10
        elif any(k in n for k in ("price", "amount", "cost", "balance", "total", "salary", "budget")):
            lo, hi = 5, 500
        else:
            lo, hi = 1, 100
    elif lo is None:
        lo = min(hi, 0) if hi >= 0 else hi - 100
    elif hi is None:
        hi = lo + 100
    if lo > hi:
        lo, hi = hi, lo
    mult = schema.get("multipleOf")
    if integer:
        lo_i, hi_i = int(-(-lo // 1)), int(hi // 1)
        if lo_i > hi_i:
            hi_i = lo_i
        v = rng.randint(lo_i, hi_i)
        if isinstance(mult, int) and mult > 0:
            v = (v // mult) * mult
            if v < lo:
                v += mult
        return v
    if isinstance(mult, (int, float)) and mult > 0:
        k_lo, k_hi = int(-(-lo // mult)), int(hi // mult)
        return round(rng.randint(k_lo, max(k_lo, k_hi)) * mult, 10)
    v = round(rng.uniform(lo, hi), 2)
    return v if lo <= v <= hi else (lo + hi) / 2


def gen_value(schema: dict[str, Any] | None, name: str, rng: random.Random, depth: int = 0) -> Any:
    """A value valid against `schema`, realistic for a field called `name`."""
    if not isinstance(schema, dict):
        return _string_for(name, {}, rng)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for comb in ("oneOf", "anyOf"):
        if isinstance(schema.get(comb), list) and schema[comb]:
            opts = [o for o in schema[comb] if isinstance(o, dict) and o.get("type") != "null"] or schema[comb]
            return gen_value(opts[0] if comb == "oneOf" else rng.choice(opts), name, rng, depth)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            if isinstance(part, dict):
                merged.update(part)
        return gen_value(merged, name, rng, depth)
    if "default" in schema and rng.random() < 0.3 and is_valid(schema["default"], schema):
        return schema["default"]
    t = _schema_type(schema)
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t == "integer":
        return _number(schema, rng, True, name)
    if t == "number":
        return _number(schema, rng, False, name)
    if t == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {"type": "string"}
        lo = schema.get("minItems", 1)
        hi = schema.get("maxItems", max(lo, 3))
        n = rng.randint(lo, max(lo, min(hi, lo + 2)))
        if depth > 3:
            n = lo
        item_name = name[:-1] if name.endswith("s") else name
        out = [gen_value(items, item_name, rng, depth + 1) for _ in range(n)]
        if schema.get("uniqueItems"):
            uniq: list[Any] = []
            for v in out:
                if v not in uniq:
                    uniq.append(v)
            out = uniq
        return out
    if t == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        if depth > 3:
            return {k: gen_value(props.get(k, {}), k, rng, depth + 1) for k in required}
        out = {}
        for k, sub in props.items():
            if k in required or rng.random() < 0.6:
                out[k] = gen_value(sub, k, rng, depth + 1)
        for k in required:
            out.setdefault(k, gen_value({}, k, rng, depth + 1))
        return out
    return _fit_length(_string_for(name, schema, rng), schema)


# ---------------------------------------------------------------------------------------------
# grounded sampling
# ---------------------------------------------------------------------------------------------
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
