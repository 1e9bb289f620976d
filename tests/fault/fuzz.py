"""Fuzz properties of every corpus loader, the tool-call parsers and the SFT row builder.

Plain functions (one input each), wrapped with hypothesis in tests/fault/test_fuzz.py (bounded
examples for CI) and in benchmarks/bench_faults.py (many more). Each returns normally or raises
AssertionError; any other exception escaping is a crash, a bug. TRIED counts inputs per property.
"""

from __future__ import annotations

import atexit
import json
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from agentscaler.llm import LLMFormatError, parse_hermes_tool_calls, parse_json_reply, parse_reply
from tasks.corpus.common import LoadIssue, RawTool
from tasks.corpus.ingest import build_corpus
from tasks.corpus.loaders import FORMATS, load_file

ROOT = Path(__file__).resolve().parents[2]
CORPORA = ROOT / "tests" / "data" / "corpora"
TRIED: Counter = Counter()
_TMP = Path(tempfile.mkdtemp(prefix="agentscaler-fuzz-"))
atexit.register(shutil.rmtree, _TMP, True)  # one folder per process; it used to stay behind in /tmp

KEYS = ["api_list", "tools", "function", "functions", "parameters", "name", "description", "properties",
        "required", "type", "inputSchema", "query_parameters", "output_parameters", "answers", "query", "result",
        "id", "question", "enum", "items", "default", "response", "api_name", "api_description",
        "required_parameters", "optional_parameters", "tool_name", "category_name", "$ref", "anyOf", "format"]
TYPES = ["string", "integer", "number", "boolean", "object", "array", "dict", "str", "int", "float", "any",
         "tuple", "List[str]", "null", "NUMBER", "STRING"]
leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                 st.text(max_size=20), st.sampled_from(TYPES), st.sampled_from(KEYS))
json_value = st.recursive(leaf, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                       st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)),
                                                                       kids, max_size=6)), max_leaves=40)


def fixture_texts() -> dict[str, str]:
    return {str(p.relative_to(CORPORA)): p.read_text("utf-8", errors="replace")
            for p in sorted(CORPORA.rglob("*")) if p.is_file() and p.suffix in (".json", ".jsonl", ".py")}


FIXTURES = fixture_texts()


def _check_items(items: list[Any], where: str) -> None:
    for it in items:
        assert isinstance(it, (RawTool, LoadIssue)), f"{where}: loader yielded {type(it).__name__}"
        if isinstance(it, LoadIssue):
            assert it.reason and it.message and it.where, f"{where}: issue without reason/message/where: {it}"
    # the ingest stage takes whatever the loaders give: normalizing must not crash either
    tools, new, report = build_corpus(items)
    assert report["accepted"] == len(tools) >= 0


def _load_check(data: bytes, suffix: str, fmt: str) -> None:
    path = _TMP / f"f{random.randrange(1 << 60)}{suffix}"
    path.write_bytes(data)
    try:
        found, items = load_file(path, fmt)
        _check_items(items, str(path))
    finally:
        path.unlink(missing_ok=True)


def loader_bytes(data: bytes, suffix: str, fmt: str) -> None:
    """Any bytes, any suffix, any format: (format, items) with clear issues; never an exception."""
    TRIED["loader_bytes"] += 1
    _load_check(data, suffix, fmt)


def loader_json(obj: Any, fmt: str, jsonl: bool) -> None:
    """Random JSON built from the formats' own keys, as a file in a given (or detected) format."""
    TRIED["loader_json"] += 1
    text = "\n".join(json.dumps(o) for o in obj) if jsonl and isinstance(obj, list) else json.dumps(obj)
    _load_check(text.encode(), ".jsonl" if jsonl else ".json", fmt)


def loader_mutated(name: str, seed: int, n_edits: int) -> None:
    """A real fixture file with random edits (cut, duplicate, swap or corrupt spans)."""
    TRIED["loader_mutated"] += 1
    rng = random.Random(seed)
    text = FIXTURES[name]
    for _ in range(n_edits):
        if not text:
            break
        i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        op = rng.randrange(5)
        if op == 0:
            text = text[:i] + text[j:]
        elif op == 1:
            text = text[:j] + text[i:j] + text[j:]
        elif op == 2:
            text = text[:i] + rng.choice(['"', "{", "]", "\\", "\x00", "\ud800", "NaN", "1e999", ":", ",", "\n"]) + text[i:]
        elif op == 3:
            text = text[:i] + text[i:j][::-1] + text[j:]
        else:
            text = text[:i] + "[" * rng.randrange(1, 3000) + text[i:]
    data = text.encode("utf-8", errors="surrogatepass")
    suffix = Path(name).suffix
    for fmt in ("auto", "tau2" if suffix == ".py" else rng.choice(FORMATS[:3] + FORMATS[4:])):
        _load_check(data, suffix, fmt)


def reply_parser(data: Any) -> None:
    """Any server JSON: a ChatReply whose tool-call arguments are dicts, or LLMFormatError; nothing else."""
    TRIED["reply_parser"] += 1
    try:
        r = parse_reply(data)
    except LLMFormatError as exc:
        assert str(exc)
        return
    for c in r.tool_calls:
        assert isinstance(c["arguments"], dict) and isinstance(c["name"], str) and c["name"]
        json.dumps(c["arguments"])
    if r.tool_calls and r.content:  # hermes calls parsed out of the text leave no tags behind
        assert "<tool_call>" not in r.content or (data["choices"][0]["message"].get("tool_calls"))


def hermes_parser(text: str) -> None:
    TRIED["hermes_parser"] += 1
    try:
        rest, calls = parse_hermes_tool_calls(text)
    except LLMFormatError as exc:
        assert exc.raw == text
        return
    assert all(isinstance(c["arguments"], dict) for c in calls)
    assert rest is None or ("<tool_call>" not in rest and "</tool_call>" not in rest)


def json_reply_parser(text: str, schema: dict | None) -> None:
    TRIED["json_reply_parser"] += 1
    try:
        parse_json_reply(text, schema)
    except LLMFormatError:
        return


def sft_row(messages: Any, tools: Any) -> None:
    """Any trajectory-shaped data: an SFT row with parsed arguments, or RowError/ValidationError."""
    from pydantic import ValidationError

    from agentscaler.models import Trajectory
    from tasks.sft.export import RowError, row_from_trajectory

    TRIED["sft_row"] += 1
    try:
        traj = Trajectory(id="t", run_id="r", scenario_id="s", domain="d", trial=0, messages=messages, tools=tools,
                          final_hash="", final_diff=[], end_reason="user_stop")
        row = row_from_trajectory(traj)
    except (RowError, ValidationError):
        return
    for m in row["messages"]:
        for c in m["tool_calls"] or []:
            assert isinstance(c["function"]["arguments"], dict)


# strategies shared by the test and the benchmark
tool_call = st.fixed_dictionaries({"id": st.one_of(st.none(), st.text(max_size=5)), "type": st.just("function"),
                                   "function": st.one_of(json_value, st.fixed_dictionaries({
                                       "name": st.one_of(st.text(max_size=10), st.none(), st.integers()),
                                       "arguments": st.one_of(st.text(max_size=40), json_value,
                                                              st.just('{"a": 1,,'), st.just('{"a": 1}'))}))})
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system", "robot"]),
                                 "content": st.one_of(st.none(), st.text(max_size=30), json_value)},
                                optional={"tool_calls": st.lists(tool_call, max_size=3), "tool_call_id": st.text(max_size=4),
                                          "name": st.text(max_size=6)})
odd = st.one_of(json_value, st.just(float("inf")), st.just(float("nan")), st.just(True))
message_reply = st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(st.none(), st.text(max_size=30),
                                                                                          st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(["<tool_call>", "</tool_call>", '{"name": "f", "arguments": {"x": 1}}'])),
    max_size=6).map("".join))}, optional={"tool_calls": st.one_of(st.lists(tool_call, max_size=3), odd)})
server_reply = st.one_of(json_value, st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({
    "finish_reason": st.one_of(st.sampled_from(["stop", "length", "tool_calls", None]), odd),
    "message": st.one_of(json_value, message, message_reply)}), min_size=1, max_size=2)},
    optional={"usage": st.one_of(odd, st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens"]), odd))}))
hermes_text = st.lists(st.one_of(st.text(max_size=20), st.sampled_from([
    "<tool_call>", "</tool_call>", '{"name": "f", "arguments": {"x": 1}}', '{"name": "f", "arguments": "{\\"x\\": 2}"}',
    '{"name": 3}', '{"name": "f", "arguments": [1]}', '{"name": "f", "extra": 1}', "{", "}"])), max_size=8).map("".join)
