"""Content hashes: every artifact id is a hash of its canonical JSON, so re-runs find finished work."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(obj: Any, length: int = 16) -> str:
    """Short sha256 of the canonical JSON of obj (16 hex chars = 64 bits, ample for ids)."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:length]
