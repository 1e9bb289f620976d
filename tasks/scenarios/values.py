"""Values valid against a JSON Schema (enum, const, format, type, range), realistic for a field's name.

`gen_value` is the one value generator: it fills seed databases (tasks.environments.seed) and is
the schema step of argument grounding (tasks.scenarios.arguments), so seed values are valid
arguments by construction.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from agentscaler.naming import snake
from agentscaler.schemas import check, is_valid, value_problem
from envs.fastcheck import flat_checker, value_checker

_FAST: dict[int, tuple[Any, Any]] = {}  # id(schema) -> (the schema, kept alive; its fast checker or None)
# JSON scalars by exact type (no subclass such as numpy's float64): where the fast check's "no" is final.
# Most rejected candidates are these (seed values of another column's type): all of jsonschema's work.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def valid(value: Any, schema: Any) -> bool:
    """agentscaler.schemas.is_valid, with envs.fastcheck's exact check of a flat schema first (most
    parameter schemas are a type or a string enum; an object of such properties): ~10x faster on
    the values it accepts, which are most, and on JSON scalars it refuses; jsonschema decides the rest
    (envs.fastcheck is exact on JSON values: tests/envs/test_fastcheck.py). The sampler and the seed
    check every candidate value, thousands per domain. A value is_valid refuses before any schema
    (NaN, an infinity, too deep: value_problem) is refused here too, and a malformed schema (one the
    metaschema refuses, e.g. a type list with repeats) gets no fast check: is_valid refuses it."""
    hit = _FAST.get(id(schema))
    if hit is None or hit[0] is not schema:
        fast = None
        if check(schema).problem is None:  # a malformed schema: is_valid refuses every value
            fast = value_checker(schema)
            if fast is None:
                flat = flat_checker(schema)
                # properties/required bind objects only: any other value is valid unless the type says object
                other = "type" not in schema
                fast = (lambda v, f=flat: f(v) if isinstance(v, dict) else other) if flat is not None else None
        if len(_FAST) > 4096:
            _FAST.clear()
        hit = _FAST[id(schema)] = (schema, fast)
    if hit[1] is not None:
        if hit[1](value):
            if value_problem(value) is None:
                return True
        elif type(value) in _SCALARS:  # exact on JSON scalars too: no jsonschema run to say no again
            return False
    return is_valid(value, schema)

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
    if "default" in schema and rng.random() < 0.3 and valid(schema["default"], schema):
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
