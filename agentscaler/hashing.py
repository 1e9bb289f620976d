"""Content hashes: every artifact id is a hash of its canonical JSON, so re-runs find finished work."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import orjson


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(obj: Any, length: int = 16) -> str:
    """Short sha256 of the canonical JSON of obj (16 hex chars = 64 bits, ample for ids)."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:length]


def _norm(v: Any, finite: bool = False) -> Any:
    """Numbers compare by value (1 == 1.0) in call matching. finite: a NaN or an infinity raises
    ValueError (orjson would write it as null)."""
    if isinstance(v, float):
        if v.is_integer():
            return int(v)
        if finite and not math.isfinite(v):
            raise ValueError("not a finite number")
        return v
    if isinstance(v, dict):
        return {k: _norm(x, finite) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x, finite) for x in v]
    return v


def call_key(name: str, args: dict[str, Any]) -> str:
    """The text two calls share when they are the same call (name, arguments by value). Keys are
    only compared within one process: orjson's sorted-key text (5x faster), or canonical JSON for
    what orjson would not write exactly (NaN, infinities, integers over 64 bits, odd objects)."""
    try:
        return orjson.dumps([name, _norm(args, True)], option=orjson.OPT_SORT_KEYS).decode()
    except (ValueError, TypeError):  # orjson.JSONEncodeError is a TypeError
        return canonical_json([name, _norm(args)])
