"""The sandbox's JSON codec, both ends: the worker's (envs.worker._loads, _dumps, _dumps_content) and
the parent's reply reader (envs.sandbox.decode_reply): the same text and values as the stdlib's json,
which they replace per call for speed (a C encoder made once, the C scanner called directly,
orjson); the protocol and the content an agent sees must not change."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sandbox import decode_reply
from envs.worker import _dumps, _dumps_content, _loads

TEXT = st.text(alphabet=st.sampled_from(list('[]{}"\\/ab\n\u00e9\u2028\ud800\U0001f600')), max_size=10)
VALUES = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
                      | st.floats() | TEXT,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                      max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_encoders_write_what_the_stdlib_writes(value):
    assert _dumps_content(value) == json.dumps(value, ensure_ascii=False, default=str)
    assert _dumps(value) == json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_loads_reads_what_the_stdlib_reads(value):
    raw = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    got, want = _loads(raw), json.loads(raw)
    assert json.dumps(got) == json.dumps(want)  # NaN != NaN: compare the texts
    assert json.dumps(decode_reply(raw)) == json.dumps(want)  # the parent reads what the worker wrote
    assert json.dumps(_loads(raw + b"\n")) == json.dumps(want)  # a trailing newline (the zygote's report)


def test_non_json_values_and_bad_text():
    class Thing:
        def __str__(self) -> str:
            return "thing"

    assert _dumps_content({"t": Thing(), "s": {1}}) == json.dumps({"t": Thing(), "s": {1}}, ensure_ascii=False, default=str)
    assert _dumps_content({1: "a", None: 2, 1.5: True}) == json.dumps({1: "a", None: 2, 1.5: True}, ensure_ascii=False)
    with pytest.raises(TypeError):
        _dumps_content({(1, 2): "tuple key"})
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises((RecursionError, ValueError)):
        _dumps_content(cycle)
    assert _dumps_content(float("inf")) == "Infinity" and math.isnan(_loads(b"NaN"))
    for big in (-(2 ** 63) - 1, 2 ** 64, 10 ** 30):  # orjson would read some of these as floats
        assert decode_reply(str(big).encode()) == big and type(decode_reply(f"[{big}]".encode())[0]) is int
    for bad in (b"", b" ", b"{", b"[1] x", b'{"a":1}{', b"\xff"):
        with pytest.raises(ValueError):
            _loads(bad)
        with pytest.raises(ValueError):
            decode_reply(bad)
