"""JSON Schema in one place: whether a schema is well formed, and whether a value satisfies it.

Ingestion, the environment (every tool call), scenario grounding, argument sampling and
verification all ask these two questions, so they ask them here, with one decision about a
malformed schema: a schema that Draft 2020-12's meta-schema rejects (the same verdict as
`Draft202012Validator.check_schema`, regexes compiled) validates nothing. Every value is invalid
against it, with an error naming the schema's problem; nothing raises, here or in a caller.
A schema that breaks only while a value is checked (a `$ref` that resolves nowhere) counts as
malformed too. `None` means "no schema": every value is valid.

Checks are cached: a meta-schema verdict by the skeleton of each schema level (`SchemaChecker`),
a compiled validator by the schema object and by its JSON text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match

from agentscaler.hashing import canonical_json

_META = Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
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
    """None when `schema` is a well-formed JSON Schema (Draft 2020-12), else what is wrong and where."""
    if schema is None:
        return None
    if not isinstance(schema, (dict, bool)):
        return f"a schema is an object or a boolean, not {type(schema).__name__}"
    return _CHECKER.error(schema)


class Check:
    """The compiled check of one schema. `problem` is None, or why the schema validates nothing."""

    __slots__ = ("schema", "validator", "problem")

    def __init__(self, schema: Any):
        self.schema = schema
        self.validator: Draft202012Validator | None = None
        self.problem = schema_problem(schema)
        if self.problem is None and schema is not None:
            self.validator = Draft202012Validator(schema, format_checker=FormatChecker())

    def is_valid(self, value: Any) -> bool:
        if self.problem is not None:
            return False
        if self.validator is None:
            return True
        try:
            return self.validator.is_valid(value)
        except Exception as exc:  # noqa: BLE001 - the schema broke while checking: it is malformed
            self.problem = f"{type(exc).__name__}: {exc}"[:300]
            return False

    def errors(self, value: Any) -> list[str]:
        """Every error as 'path: message' (empty = valid); a malformed schema is one error."""
        if self.problem is None and self.validator is not None:
            try:
                return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                        for e in self.validator.iter_errors(value)]
            except Exception as exc:  # noqa: BLE001 - as in is_valid
                self.problem = f"{type(exc).__name__}: {exc}"[:300]
        return [f"<schema>: invalid schema: {self.problem}"] if self.problem is not None else []

    def first_error(self, value: Any) -> tuple[str, str] | None:
        """(path, message) of the most relevant error, or None when the value is valid."""
        if self.problem is None and self.validator is not None:
            try:
                err = best_match(self.validator.iter_errors(value))
            except Exception as exc:  # noqa: BLE001 - as in is_valid
                self.problem = f"{type(exc).__name__}: {exc}"[:300]
            else:
                return None if err is None else ("/".join(str(p) for p in err.absolute_path), err.message)
        return ("", f"invalid schema: {self.problem}") if self.problem is not None else None


_BY_ID: dict[int, Check] = {}  # the same schema object (a loaded spec's) is looked up without serializing it
_BY_TEXT: dict[bytes, Check] = {}


def check(schema: Any) -> Check:
    """The cached Check of a schema (by object identity, then by JSON text)."""
    hit = _BY_ID.get(id(schema))
    if hit is not None and hit.schema is schema:
        return hit
    text = _key(schema)
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
