"""BFCL adapter. The matcher tests use hand-made model answers (a scripted "model": these tests are
about our port of BFCL's AST matcher) against BFCL's real possible_answer format and data."""

from __future__ import annotations

import pytest

from tasks.evaluation.bfcl import ast_check, load_category, openai_tools, score_items, standardize_string, tool_name

FUNCS = [{"name": "math.hypot", "description": "norm", "parameters": {"type": "dict", "properties": {
    "x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"}}, "required": ["x", "y"]}},
    {"name": "area", "description": "a", "parameters": {"type": "dict", "properties": {
        "radius": {"type": "float"}, "unit": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "dict", "properties": {"a": {"type": "integer"}}}}, "required": ["radius"]}}]
GT_HYPOT = [{"math.hypot": {"x": [4], "y": [5], "z": ["", 0]}}]
GT_AREA = [{"area": {"radius": [5.0], "unit": ["cm", ""], "tags": [["Big Circle"], ""], "opts": [{"a": [1]}, ""]}}]


def test_simple_name_required_optional_and_types():
    assert ast_check(FUNCS[:1], [{"math_hypot": {"x": 4, "y": 5}}], GT_HYPOT, "simple")["valid"]
    assert ast_check(FUNCS[:1], [{"math_hypot": {"x": 4, "y": 5, "z": 0}}], GT_HYPOT, "simple")["valid"]
    r = ast_check(FUNCS[:1], [{"hypot": {"x": 4, "y": 5}}], GT_HYPOT, "simple")
    assert r["error_type"] == "simple_function_checker:wrong_func_name"
    assert ast_check(FUNCS[:1], [{"math_hypot": {"x": 4}}], GT_HYPOT, "simple")["error_type"].endswith("missing_required")
    assert ast_check(FUNCS[:1], [{"math_hypot": {"x": 4, "y": 6}}], GT_HYPOT, "simple")["error_type"] == "value_error:others"
    assert ast_check(FUNCS[:1], [{"math_hypot": {"x": 4, "y": "5"}}], GT_HYPOT, "simple")["error_type"] == "type_error:simple"
    assert ast_check(FUNCS[:1], [{"math_hypot": {"x": 4, "y": 5, "w": 1}}], GT_HYPOT, "simple")["error_type"].endswith("unexpected_param")
    assert not ast_check(FUNCS[:1], [], GT_HYPOT, "simple")["valid"]


def test_int_for_float_string_normalization_lists_and_dicts():
    f = FUNCS[1:]
    assert ast_check(f, [{"area": {"radius": 5}}], GT_AREA, "simple")["valid"]  # int accepted for float
    assert not ast_check(f, [{"area": {"radius": 5.5}}], GT_AREA, "simple")["valid"]
    assert ast_check(f, [{"area": {"radius": 5.0, "unit": "CM"}}], GT_AREA, "simple")["valid"]
    assert ast_check(f, [{"area": {"radius": 5.0, "tags": ["big circle"]}}], GT_AREA, "simple")["valid"]
    assert not ast_check(f, [{"area": {"radius": 5.0, "tags": ["small"]}}], GT_AREA, "simple")["valid"]
    assert ast_check(f, [{"area": {"radius": 5.0, "opts": {"a": 1}}}], GT_AREA, "simple")["valid"]
    assert ast_check(f, [{"area": {"radius": 5.0, "opts": {"b": 1}}}], GT_AREA, "simple")["error_type"] == "value_error:dict_key"
    assert standardize_string("April 1, 2024") == standardize_string("april 1,2024")


def test_parallel_is_order_insensitive_and_multiple_picks_expected():
    gt = GT_HYPOT + [{"area": {"radius": [2.0]}}]
    calls = [{"area": {"radius": 2.0}}, {"math_hypot": {"x": 4, "y": 5}}]
    assert ast_check(FUNCS, calls, gt, "parallel_multiple")["valid"]
    assert not ast_check(FUNCS, calls[:1], gt, "parallel_multiple")["valid"]
    assert ast_check(FUNCS, [{"area": {"radius": 2.0}}], [{"area": {"radius": [2.0]}}], "multiple")["valid"]
    assert not ast_check(FUNCS, [{"math_hypot": {"x": 4, "y": 5}}], [{"area": {"radius": [2.0]}}], "multiple")["valid"]
    assert ast_check(FUNCS, [], None, "irrelevance")["valid"]
    assert not ast_check(FUNCS, calls, None, "irrelevance")["valid"]


def _first(v):
    if isinstance(v, list):
        v = next((x for x in v if x != ""), "")
    return {k: _first(x) for k, x in v.items()} if isinstance(v, dict) else v


@pytest.mark.parametrize("category", ["simple", "parallel_multiple", "live_simple"])
def test_real_data_ground_truth_answers_score_and_wrong_ones_fail(category):
    items = load_category(category)
    assert len(items) > 20 and all(it["ground_truth"] for it in items)
    good, bad = {}, {}
    for it in items:
        calls = [{tool_name(n): {p: _first(v) for p, v in params.items() if _first(v) != ""}}
                 for gt in it["ground_truth"] for n, params in gt.items()]
        good[it["id"]] = calls[::-1]  # reversed: parallel categories are order-insensitive
        bad[it["id"]] = [{"no_such_tool": {}}] * len(calls)
    ok = score_items(items, good)
    assert ok["accuracy"] >= 0.9, ok["errors"]  # a few BFCL answers omit a required param: BFCL fails those too
    assert score_items(items, bad)["accuracy"] == 0.0
    tools = openai_tools(items[0]["functions"])
    assert tools[0]["function"]["parameters"]["type"] == "object" and "." not in tools[0]["function"]["name"]


@pytest.mark.llm
def test_smollm2_run_over_a_handful(local_llm):
    """Real SmolLM2 (local server), a forced call (grammar): it gets the first simple items right."""
    from agentscaler.llm import LLMClient
    from tasks.evaluation.bfcl import run_bfcl

    res = run_bfcl(LLMClient(local_llm, timeout=180, concurrency=1), "simple", limit=3, tool_choice="required")
    assert res["items"] == 3 and not res["transport_errors"], res["transport_errors"]
    assert all(r["output"] for r in res["results"])  # a call was made and parsed for every item
    assert res["correct"] >= 2, res["results"]  # measured 3/3 (and 6/8 on the first 8)
