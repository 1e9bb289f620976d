"""Hostile corpora and replies: every loader, the tool-call parsers and the SFT row builder, fuzzed.

Bounded for CI (max_examples per property; benchmarks/bench_faults.py runs many more). No input
may crash them: each gives items and clear issues (reason, message, where), or raises only the
module's own error type (LLMFormatError, RowError).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.corpus.loaders import FORMATS
from tests.fault import fuzz

CI = settings(max_examples=40, deadline=None, derandomize=False, suppress_health_check=list(HealthCheck))
fmt = st.sampled_from(("auto",) + FORMATS)


@CI
@given(st.binary(max_size=400), st.sampled_from([".json", ".jsonl", ".py", ".txt"]), fmt)
def test_loaders_survive_random_bytes(data, suffix, f):
    fuzz.loader_bytes(data, suffix, f)


@CI
@given(fuzz.json_value, fmt, st.booleans())
def test_loaders_survive_random_json_of_their_own_keys(obj, f, jsonl):
    fuzz.loader_json(obj, f, jsonl)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(fuzz.FIXTURES)), st.integers(0, 2**32), st.integers(1, 6))
def test_loaders_survive_mutated_real_fixtures(name, seed, n):
    fuzz.loader_mutated(name, seed, n)


@CI
@given(fuzz.server_reply)
def test_reply_parser_gives_dict_arguments_or_format_error(data):
    fuzz.reply_parser(data)


@CI
@given(fuzz.hermes_text)
def test_hermes_parser_gives_calls_or_format_error(text):
    fuzz.hermes_parser(text)


@CI
@given(st.one_of(st.text(max_size=60), fuzz.json_value.map(lambda v: __import__("json").dumps(v))),
       st.one_of(st.none(), st.just({"type": "object", "required": ["a"]})))
def test_json_reply_parser_gives_value_or_format_error(text, schema):
    fuzz.json_reply_parser(text, schema)


@CI
@given(st.lists(fuzz.message, max_size=5), st.one_of(st.lists(fuzz.json_value, max_size=2), fuzz.json_value))
def test_sft_rows_never_carry_malformed_calls(messages, tools):
    fuzz.sft_row(messages, tools)
