"""benchmarks/tool_choice.py's own arithmetic and report on hand-built rows (no model: what it counts is ours)."""

from __future__ import annotations

from benchmarks.tool_choice import markdown, paired, summary


def _rows(rights: list[bool], n_tools: int = 8) -> list[dict]:
    return [{"scenario_id": f"s{i}", "domain": f"d{i % 4}", "right": r, "n_tools": n_tools, "gold_prob": 0.5 if r else 0.1,
             "gold_rank": 1 if r else 3, "text_match": True} for i, r in enumerate(rights)]


def test_paired_difference_is_per_scenario_and_summary_buckets_by_tool_count():
    a, b = _rows([False] * 40), _rows([i % 2 == 0 for i in range(40)])
    d = paired(a, b)
    assert d["estimate"] == 0.5 and d["items"] == 40 and d["domains"] == 4
    assert paired(b, b)["estimate"] == 0.0 and paired(b, b)["low"] == 0.0 == paired(b, b)["high"]
    # scenarios only one side has are left out of the pairing
    assert paired(a[:10], b)["items"] == 10
    s = summary(b + [{**r, "scenario_id": r["scenario_id"] + "x", "n_tools": 3} for r in a])
    assert s["by_tools"]["6-9"]["estimate"] == 0.5 and s["by_tools"]["2-5"]["estimate"] == 0.0
    assert s["by_tools"]["10+"]["estimate"] is None and s["right"]["estimate"] == 0.25
    assert s["gold_rank"] == 2.5


def test_markdown_says_it_is_not_pass1_and_lists_every_model_and_difference():
    base, trained = _rows([False] * 8), _rows([True] * 8)
    out = {"name": "tc", "workspace": "/ws", "curve": "c1", "dtype": "bfloat16", "per_domain": 10,
           "max_prompt_tokens": 3072, "domains_over_prompt_limit": 2, "items": 8, "domains": 4, "skipped": {},
           "reference": {"text_match": summary(base)["right"], "chance": 0.125},
           "models": [{"label": "0 (base)", "seconds": 0.0, "summary": summary(base)},
                      {"label": "8", "seconds": 12.0, "summary": summary(trained)}],
           "differences": [{"from": "0 (base)", "to": "8", "difference": paired(base, trained)}]}
    md = markdown(out)
    assert "not pass^1" in md and "| 0 (base) | 0.0 [0.0, 0.0]" in md and "| 8 | 100.0 [100.0, 100.0]" in md
    assert "0 (base) -> 8: 100.0 [100.0, 100.0]" in md and "chance (1 / tools) | 12.5" in md
    assert "not recorded" in md and "| 12 s |" in md
