"""JSON Schema in one place: whether a schema is well formed, and whether a value satisfies it.

Ingestion, the environment (every tool call), scenario grounding, argument sampling and
verification all ask these two questions, so they ask them here, with one decision about a
malformed schema: a schema that Draft 2020-12's meta-schema rejects (the same verdict as
`Draft202012Validator.check_schema`, regexes compiled) validates nothing. Every value is invalid
against it, with an error naming the schema's problem; nothing raises, here or in a caller.
`None` means "no schema": every value is valid.

Checking never crashes or hangs the caller (issue 22, class 7). A schema is malformed too when its
checks could not end or could take minutes (`schema_hazard` names the reason ingestion counts):
it nests deeper than MAX_SCHEMA_DEPTH; a `$ref` is not local or resolves nowhere; references and
applicators loop without consuming the value, or fan out to more than MAX_EXPANSION subschema
checks; a regex nests quantifiers or repeats overlapping alternatives (exponential backtracking).
A value nested deeper than MAX_VALUE_DEPTH, or holding NaN or an infinity, is invalid. One value's
check stops after MAX_SECONDS: every keyword looks at the deadline, every regex runs in the
`regex` engine under it, and uniqueItems is linear. A check stopped that way (or by a
RecursionError) is an error for that value only, never a verdict on the schema.

Checks are cached: a meta-schema verdict by the skeleton of each schema level (`SchemaChecker`),
a compiled validator by the schema object and by its JSON text.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Iterator
from functools import lru_cache
from re import _parser as sre  # the stdlib's own regex parser: its tree shows quantifiers and alternatives
from typing import Any
from urllib.parse import unquote

import orjson
import regex
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema.exceptions import best_match
from jsonschema.validators import extend

from agentscaler.hashing import canonical_json

MAX_SCHEMA_DEPTH = 64  # JSON nesting of a schema
MAX_VALUE_DEPTH = 64  # JSON nesting of a value checked against a schema (keywords recurse into it)
MAX_SECONDS = 1.0  # one value's check
MAX_EXPANSION = 1000  # subschemas one part of a value may meet through references and applicators
_BIG_REPEAT = 8  # a regex repeat of more rounds than this counts as a loop


# --- values ---------------------------------------------------------------------------------------

def nesting(value: Any, limit: int) -> int:
    """How deep dicts and lists nest in `value`, counted iteratively (a hostile value must not blow
    the stack) and only up to the first level past `limit`."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        cur, d = stack.pop()
        if isinstance(cur, dict):
            items: Any = cur.values()
        elif isinstance(cur, (list, tuple)):
            items = cur
        else:
            continue
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        stack.extend((v, d + 1) for v in items if isinstance(v, (dict, list, tuple)))
    return deepest


_FLAT = frozenset((str, int, bool, type(None)))  # values with nothing to check (floats may be NaN)


def value_problem(value: Any) -> str | None:
    """Why a value is not a JSON value any schema could accept (NaN or an infinity, which also pass
    every numeric bound; nesting deeper than MAX_VALUE_DEPTH), or None. One walk, no recursion."""
    if type(value) is dict and all(type(v) in _FLAT for v in value.values()):  # most tool calls: no walk
        return None
    stack = [(value, 1)]
    while stack:
        cur, d = stack.pop()
        if isinstance(cur, float):
            if not math.isfinite(cur):
                return "NaN or Infinity is not a JSON number"
        elif isinstance(cur, (dict, list, tuple)):
            if d > MAX_VALUE_DEPTH:
                return f"the value nests deeper than {MAX_VALUE_DEPTH} levels"
            stack.extend((v, d + 1) for v in (cur.values() if isinstance(cur, dict) else cur))
    return None


# --- hazards: schemas whose checks would not end, or would take minutes ------------------------------

def _pattern_hazard(pattern: str) -> str | None:
    """Why a regex can backtrack exponentially (nested quantifiers, overlapping alternatives under a
    quantifier), or None. A static screen: polynomial cases are left to the check's deadline."""
    try:
        tree = sre.parse(pattern)
    except RecursionError:
        return "it nests too deeply"
    except Exception:  # noqa: BLE001 - not a regex at all: the meta-schema check names it
        return None
    return _scan(list(tree), None)


def _scan(items: list, outer: str | None) -> str | None:
    """outer: None outside repeats, "bounded" inside a small repeat, "loop" inside a large one."""
    for op, av in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            lo, hi, body = av
            loop = hi is sre.MAXREPEAT or hi > _BIG_REPEAT
            inner = outer
            if hi >= 2:
                if outer == "loop" or (outer == "bounded" and loop):
                    return "nested quantifiers (catastrophic backtracking)"
                if loop and _alternatives_overlap(list(body)):
                    return "a quantifier over overlapping alternatives (catastrophic backtracking)"
                inner = "loop" if loop or outer == "loop" else "bounded"
            found = _scan(list(body), inner)
        elif op in (sre.POSSESSIVE_REPEAT, sre.ATOMIC_GROUP):  # never backtracked into from outside
            found = _scan(list(av[2] if op is sre.POSSESSIVE_REPEAT else av), None)
        elif op is sre.SUBPATTERN:
            found = _scan(list(av[-1]), outer)
        elif op is sre.BRANCH:
            found = next((f for b in av[1] if (f := _scan(list(b), outer))), None)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            found = _scan(list(av[1]), outer)
        elif op is sre.GROUPREF_EXISTS:
            found = next((f for b in av[1:] if b is not None and (f := _scan(list(b), outer))), None)
        else:
            found = None
        if found:
            return found
    return None


def _first(items: list) -> list[tuple[int, int]] | None:
    """Code-point ranges the sequence's first character can take; None: anything (or nothing)."""
    for op, av in items:
        if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            continue  # zero-width
        if op is sre.LITERAL:
            return [(av, av)]
        if op is sre.IN:
            out = []
            for o, a in av:
                if o is sre.LITERAL:
                    out.append((a, a))
                elif o is sre.RANGE:
                    out.append(a)
                else:
                    return None
            return out
        if op is sre.SUBPATTERN:
            return _first(list(av[-1]))
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            return _first(list(av[2])) if av[0] > 0 else None
        if op is sre.BRANCH:
            out = []
            for b in av[1]:
                f = _first(list(b))
                if f is None:
                    return None
                out += f
            return out
        return None
    return None


def _alternatives_overlap(items: list) -> bool:
    for op, av in items:
        if op is sre.SUBPATTERN and _alternatives_overlap(list(av[-1])):
            return True
        if op is sre.BRANCH:
            firsts = [_first(list(b)) for b in av[1]]
            for i, a in enumerate(firsts):
                for b in firsts[i + 1:]:
                    if a is None or b is None or any(x0 <= y1 and y0 <= x1 for x0, x1 in a for y0, y1 in b):
                        return True
    return False


_SAME_ONE = ("not", "if", "then", "else")  # applicators that check the same part of the value
_SAME_LIST = ("allOf", "anyOf", "oneOf")
_MISSING = object()
# The keywords schema_hazard acts on (references, embedded resources, regexes, applicators that
# check the same part of the value): a schema with none of them has no hazard
_HAZARD_KEYS = tuple(f'"{k}":'.encode() for k in ("$ref", "$dynamicRef", "$id", "pattern", "patternProperties",
                                                   "unevaluatedProperties", "dependentSchemas", *_SAME_ONE,
                                                   *_SAME_LIST))


def _resolve(root: dict[str, Any], ref: str, anchors: dict[str, Any]) -> Any:
    """The subschema a local reference names (#, #/json/pointer, #anchor), else _MISSING."""
    if not ref.startswith("#"):
        return _MISSING
    frag = unquote(ref[1:])
    if not frag:
        return root
    if not frag.startswith("/"):
        return anchors.get(frag, _MISSING)
    cur: Any = root
    for tok in frag[1:].split("/"):
        tok = tok.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return _MISSING
    return cur if isinstance(cur, (dict, bool)) else _MISSING


def local_ref(root: dict[str, Any], ref: str) -> Any:
    """The subschema a local reference names in `root` (#, #/json/pointer), or None."""
    target = _resolve(root, ref, {})
    return None if target is _MISSING else target


def schema_hazard(schema: Any) -> tuple[str, str] | None:
    """(reason, message) when checking values against `schema` could crash or hang the caller:
    too_deep, bad_ref (not local, resolves nowhere, an embedded $id), cyclic_ref, ref_fanout,
    unsafe_pattern. None otherwise (the meta-schema is asked separately)."""
    if not isinstance(schema, dict):
        return None
    if nesting(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        return "too_deep", f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
    try:
        text = orjson.dumps(schema)
    except (TypeError, orjson.JSONEncodeError):
        text = None
    if text is not None and not any(k in text for k in _HAZARD_KEYS):
        # Most tool schemas (a flat object of typed properties): no keyword below occurs anywhere in
        # it, so nothing can resolve wrongly, loop, fan out or run a regex (the walk would find the
        # same); orjson writes a key as `"key":` exactly, so a key present is never missed
        return None
    nodes: dict[int, tuple[str, dict[str, Any]]] = {}  # every subschema met: id -> (path, schema)
    anchors: dict[str, Any] = {}

    def walk(path: str, top: dict[str, Any], new: list[int]) -> str | None:
        stack = [(path, top)]
        while stack:
            p, node = stack.pop()
            if id(node) in nodes:
                continue
            nodes[id(node)] = (p, node)
            new.append(id(node))
            if node is not schema and "$id" in node:
                return f"an embedded $id at {p} (one schema, one resource)"
            for k in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(k), str):
                    anchors.setdefault(node[k], node)
            stack.extend((f"{p}/{sp}", sub) for sp, sub in _subschemas(node) if isinstance(sub, dict))
        return None

    work: list[int] = []
    if (bad := walk("", schema, work)) is not None:
        return "bad_ref", bad
    edges: dict[int, list[int]] = {}
    patterns = unevaluated = False
    while work:
        nid = work.pop()
        path, node = nodes[nid]
        out: list[int] = []
        for k in ("$ref", "$dynamicRef"):
            ref = node.get(k)
            if not isinstance(ref, str):
                continue
            target = _resolve(schema, ref, anchors)
            if target is _MISSING:
                return "bad_ref", f"{k} {ref[:100]!r} at {path or '/'} names no subschema of this schema (#, #/pointer, #anchor)"
            if isinstance(target, dict):
                if id(target) not in nodes and (bad := walk(f"{path}/{k}", target, work)) is not None:
                    return "bad_ref", bad
                out.append(id(target))
        out += [id(node[k]) for k in _SAME_ONE if isinstance(node.get(k), dict)]
        out += [id(x) for k in _SAME_LIST if isinstance(node.get(k), list) for x in node[k] if isinstance(x, dict)]
        if isinstance(node.get("dependentSchemas"), dict):
            out += [id(x) for x in node["dependentSchemas"].values() if isinstance(x, dict)]
        edges[nid] = out
        found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            found += list(node["patternProperties"])
            patterns = True
        unevaluated = unevaluated or "unevaluatedProperties" in node
        for pat in found:
            why = _pattern_hazard(pat)
            if why:
                return "unsafe_pattern", f"pattern {pat[:100]!r} at {path or '/'}: {why}"
    if patterns and unevaluated:
        return "unsafe_pattern", ("unevaluatedProperties next to patternProperties (that check would run "
                                  "their regexes without a time bound)")
    return _loop_or_fanout(edges, nodes)


def _loop_or_fanout(edges: dict[int, list[int]], nodes: dict[int, tuple[str, dict[str, Any]]]) -> tuple[str, str] | None:
    """A cycle of references/applicators that consume nothing of the value, or a subschema that
    expands to more than MAX_EXPANSION checks of one part of a value (iterative DFS)."""
    state: dict[int, int] = {}  # 1: on the path, 2: done
    expansion: dict[int, int] = {}
    for start in edges:
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(edges[start]))]
        while stack:
            nid, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[nid] = 2
                expansion[nid] = min(MAX_EXPANSION + 1, 1 + sum(expansion[c] for c in edges[nid]))
                if expansion[nid] > MAX_EXPANSION:
                    return "ref_fanout", (f"the subschema at {nodes[nid][0] or '/'} fans out to more than "
                                          f"{MAX_EXPANSION} subschema checks per value")
            elif state.get(nxt) == 1:
                return "cyclic_ref", (f"a reference cycle through {nodes[nxt][0] or '/'} checks the same "
                                      "value forever")
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(edges[nxt])))
    return None


# --- the validator: every keyword under the deadline -------------------------------------------------

class ValidationStopped(Exception):
    """One value's check ran past MAX_SECONDS (the value's error, not the schema's)."""


_STATE = threading.local()  # .deadline of the check running in this thread


def _over() -> ValidationStopped:
    return ValidationStopped(f"the check took longer than {MAX_SECONDS:g} s and was stopped")


def _bounded(keyword: Any) -> Any:
    def bounded(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > getattr(_STATE, "deadline", math.inf):
            raise _over()
        return keyword(validator, value, instance, schema)
    return bounded


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def _search(pattern: str, text: str) -> bool:
    """re.search semantics in the `regex` engine, stopped at the check's deadline."""
    left = getattr(_STATE, "deadline", math.inf) - time.monotonic()
    if left <= 0:
        raise _over()
    try:
        return _compiled(pattern).search(text, timeout=None if left == math.inf else left) is not None
    except TimeoutError:
        raise _over() from None


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, pp: dict[str, Any], instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pp.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator: Any, aP: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's keyword, with patternProperties matched by _search."""
    if not validator.is_type(instance, "object"):
        return
    props = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = {k for k in instance if k not in props and not any(_search(p, k) for p in patterns)}
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        listed = sorted(extras, key=str)
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{', '.join(map(repr, listed))} {verb} not match any of the regexes: "
                                  f"{', '.join(map(repr, sorted(patterns)))}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, listed))} {verb} unexpected)")


def _json_key(v: Any) -> Any:
    """A hashable key equal for JSON-equal values (1 == 1.0, true != 1, key order ignored)."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, numbers.Number):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    if isinstance(v, dict):
        return ("d", frozenset((k, _json_key(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return ("l", tuple(_json_key(x) for x in v))
    return ("o", repr(v))


def _unique_items(validator: Any, uI: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """Linear (jsonschema compares unhashable items pairwise)."""
    if uI and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            key = _json_key(item)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


_OWN = {"pattern": _pattern, "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties, "uniqueItems": _unique_items}
Validator = extend(Draft202012Validator, {k: _bounded(_OWN.get(k, f)) for k, f in Draft202012Validator.VALIDATORS.items()})
FORMATS = FormatChecker()


@FORMATS.checks("regex", raises=(regex.error, RecursionError, OverflowError, ValueError, TypeError))
def _is_regex(instance: Any) -> bool:
    """What the `pattern` keyword runs must compile in its engine."""
    return not isinstance(instance, str) or regex.compile(instance) is not None


_META = Validator(Validator.META_SCHEMA, format_checker=FORMATS)
_ANNOTATIONS = ("description", "title", "$comment")
_SUB_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
            "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_SUB_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_MAX_CACHED = 20_000


def _key(obj: Any) -> bytes:
    """A cache key for JSON data (fast; canonical JSON where orjson refuses the data)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return canonical_json(obj).encode("utf-8", "surrogatepass")


def _subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, subschema) of one level's schema positions."""
    for k in _SUB_ONE:
        if k in schema:
            yield k, schema[k]
    for k in _SUB_LIST:
        if isinstance(schema.get(k), list):
            for i, x in enumerate(schema[k]):
                yield f"{k}/{i}", x
    for k in _SUB_MAP:
        if isinstance(schema.get(k), dict):
            for kk, x in schema[k].items():
                yield f"{k}/{kk}", x


def skeleton(schema: Any) -> Any:
    """One level of a schema with its variable parts neutralized: free text blanked (descriptions,
    titles), defaults/examples/enum values/required names dropped, subschemas emptied (they are
    checked on their own). The meta-schema's verdict on this level is unchanged, so equal
    skeletons share one check. Only schema positions are touched, never values; the keys of
    patternProperties stay (they are regexes the meta-schema checks)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in _ANNOTATIONS and isinstance(v, str):
            out[k] = ""
        elif k in ("default", "const"):
            out[k] = None
        elif k in ("examples", "enum") and isinstance(v, list):
            out[k] = []
        elif k == "required" and isinstance(v, list) and all(isinstance(x, str) for x in v) and len(set(v)) == len(v):
            out[k] = []
        elif k in _SUB_ONE and isinstance(v, (dict, bool)):
            out[k] = {}
        elif k in _SUB_LIST and isinstance(v, list):
            out[k] = [{} if isinstance(x, (dict, bool)) else x for x in v]
        elif k == "patternProperties" and isinstance(v, dict):
            out[k] = {kk: ({} if isinstance(x, (dict, bool)) else x) for kk, x in v.items()}
        elif k in _SUB_MAP and isinstance(v, dict):
            out[k] = {kk: ({} if isinstance(x, (dict, bool)) else x)
                      for kk, x in v.items()} if any(not isinstance(x, (dict, bool)) for x in v.values()) else {}
        else:
            out[k] = v
    return out


class SchemaChecker:
    """The Draft 2020-12 meta-schema check with a cache: a full check costs ~1-5 ms, so each level
    of a schema is checked by its skeleton, once per distinct skeleton. Same verdict as checking
    the whole schema: the meta-schema judges each subschema on its own, never looks inside
    annotation strings, defaults or enum values, and accepts any property name."""

    def __init__(self) -> None:
        self._seen: dict[bytes, str | None] = {}
        self.checks = 0

    def error(self, schema: Any, path: str = "") -> str | None:
        """None for a well-formed schema, else the first problem and where it is."""
        if isinstance(schema, dict):
            for sub_path, sub in _subschemas(schema):
                if isinstance(sub, dict):
                    err = self.error(sub, f"{path}/{sub_path}")
                    if err:
                        return err
        skel = skeleton(schema)
        text = _key(skel)
        if text not in self._seen:
            self.checks += 1
            err = next(iter(_META.iter_errors(skel)), None)
            self._seen[text] = None if err is None else (
                f"{err.message[:200]} at {'/'.join(map(str, err.absolute_path))}")
        found = self._seen[text]
        return f"{found} (in {path or '/'})" if found else None


_CHECKER = SchemaChecker()


def schema_problem(schema: Any) -> str | None:
    """None when `schema` is a well-formed JSON Schema (Draft 2020-12) that checks every value in
    bounded time, else what is wrong and where. Never raises."""
    if schema is None:
        return None
    if not isinstance(schema, (dict, bool)):
        return f"a schema is an object or a boolean, not {type(schema).__name__}"
    try:
        hazard = schema_hazard(schema)
        return hazard[1] if hazard else _CHECKER.error(schema)
    except Exception as exc:  # noqa: BLE001 - a schema that breaks the check itself is malformed
        return f"the schema could not be checked: {type(exc).__name__}: {exc}"[:300]


class Check:
    """The compiled check of one schema. `problem` is None, or why the schema validates nothing.

    A value that cannot be checked (nested too deeply, NaN, a check stopped at the deadline or by
    a RecursionError) gets an error of its own; `problem` never changes after construction, so one
    hostile value cannot break the schema for the values after it."""

    __slots__ = ("schema", "validator", "problem")

    def __init__(self, schema: Any):
        self.schema = schema
        self.validator: Any = None
        self.problem = schema_problem(schema)
        if self.problem is None and schema is not None:
            try:
                self.validator = Validator(schema, format_checker=FORMATS)
            except Exception as exc:  # noqa: BLE001
                self.problem = f"{type(exc).__name__}: {exc}"[:300]

    def _run(self, value: Any, work: Any) -> tuple[Any, str | None]:
        """(work(validator), None), or (None, why this value could not be checked)."""
        why = value_problem(value)
        if why is not None:
            return None, why
        _STATE.deadline = time.monotonic() + MAX_SECONDS
        try:
            return work(self.validator), None
        except ValidationStopped as exc:
            return None, str(exc)
        except RecursionError:
            return None, "the check recursed too deeply and was stopped"
        except Exception as exc:  # noqa: BLE001 - e.g. a format checker's own bug: this value's error
            return None, f"the check failed: {type(exc).__name__}: {exc}"[:300]
        finally:
            _STATE.deadline = math.inf

    def is_valid(self, value: Any) -> bool:
        if self.problem is not None:
            return False
        if self.validator is None:
            return True
        ok, _ = self._run(value, lambda v: v.is_valid(value))
        return ok is True

    def errors(self, value: Any) -> list[str]:
        """Every error as 'path: message' (empty = valid); a malformed schema is one error."""
        if self.problem is not None:
            return [f"<schema>: invalid schema: {self.problem}"]
        if self.validator is None:
            return []
        found, why = self._run(value, lambda v: [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                                                  for e in v.iter_errors(value)])
        return [f"<root>: {why}"] if why is not None else found

    def first_error(self, value: Any) -> tuple[str, str] | None:
        """(path, message) of the most relevant error, or None when the value is valid."""
        if self.problem is not None:
            return "", f"invalid schema: {self.problem}"
        if self.validator is None:
            return None
        err, why = self._run(value, lambda v: best_match(v.iter_errors(value)))
        if why is not None:
            return "", why
        return None if err is None else ("/".join(str(p) for p in err.absolute_path), err.message)


_BY_ID: dict[int, Check] = {}  # the same schema object (a loaded spec's) is looked up without serializing it
_BY_TEXT: dict[bytes, Check] = {}


def check(schema: Any) -> Check:
    """The cached Check of a schema (by object identity, then by JSON text)."""
    hit = _BY_ID.get(id(schema))
    if hit is not None and hit.schema is schema:
        return hit
    try:
        text = _key(schema)
    except (RecursionError, ValueError, TypeError):  # too deep to serialize: its own Check says why
        hit = Check(schema)
    else:
        hit = _BY_TEXT.get(text)
        if hit is None:
            hit = Check(schema)
            if len(_BY_TEXT) > _MAX_CACHED:
                _BY_TEXT.clear()
            _BY_TEXT[text] = hit
    if len(_BY_ID) > _MAX_CACHED:
        _BY_ID.clear()
    _BY_ID[id(schema)] = hit if hit.schema is schema else _own(hit, schema)
    return _BY_ID[id(schema)]


def _own(found: Check, schema: Any) -> Check:
    """A Check bound to this schema object (it keeps the object alive, so its id stays its own)."""
    c = Check.__new__(Check)
    c.schema, c.validator, c.problem = schema, found.validator, found.problem
    return c


def is_valid(value: Any, schema: Any) -> bool:
    """Does `value` satisfy `schema`? False for a malformed schema; never raises."""
    return check(schema).is_valid(value)


def errors(value: Any, schema: Any) -> list[str]:
    """'path: message' for each error of `value` against `schema` (empty = valid)."""
    return check(schema).errors(value)
