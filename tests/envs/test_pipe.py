"""envs.pipe.too_deep: the nesting of a tool result's JSON text, as the caller's json.loads sees it."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from envs.pipe import MAX_NESTING, too_deep

# strings full of what could fool a text scan: brackets, quotes, backslashes, escapes
TRICKY = st.text(alphabet=st.sampled_from(list('[]{}"\\/ab\n\u00e9\u2028')), max_size=12)
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TRICKY,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
                      max_leaves=40)


def depth(value: object) -> int:
    """Nesting of arrays and objects (a scalar: 0), by walking the value."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(VALUES, st.integers(min_value=0, max_value=6), st.booleans())
def test_the_text_scan_agrees_with_the_value_walk(value, limit, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert too_deep(text, limit) == (depth(value) > limit), text


def test_deep_and_wide_results():
    deep = json.dumps(json.loads("[" * 950 + "]" * 950)).encode()
    assert too_deep(deep) and not too_deep(b"[" * MAX_NESTING + b"]" * MAX_NESTING)
    assert too_deep(b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1))
    rows = json.dumps([{"id": i, "tags": ["a", "[[[["], "note": '"}}}'} for i in range(5000)]).encode()
    assert not too_deep(rows) and not too_deep(rows, 3) and too_deep(rows, 2)
    assert not too_deep(json.dumps("[" * 500).encode())  # brackets inside a string are text
