"""LLM dependency check: strict reply parsing, decisions and reasons recorded, fallback to the
rule-based check on a format error, the find_domains hook, and one real run on SmolLM2.

Except for the last test, replies are *scripted* (canned or computed from the prompt): these
tests are about our own parsing, bookkeeping and fallback, not about a model's judgement.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from agentscaler.llm import ChatReply, LLMClient, LLMFormatError
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from tasks.discover.check import LLMDependencyChecker, llm_dependency_check, parse_decision
from tasks.discover.config import DiscoverConfig
from tasks.discover.discover import discover
from tasks.discover.domains import find_domains
from tasks.discover.embed import embed_tools
from tasks.discover.graph import build_graph


def tool(name, desc, params=None):
    props = {k: {"type": "string", "description": v} for k, v in (params or {}).items()}
    return Tool(name=name, source_name=name, source="test", description=desc,
                parameters={"type": "object", "properties": props, "required": list(props)}).with_id()


TOOLS = [tool("search_products", "Search products by keyword.", {"query": "keyword"}),
         tool("place_order", "Place an order for a product.", {"product_id": "product", "user_id": "user"}),
         tool("get_weather", "Weather forecast for a city.", {"city": "city name"})]
DECISIONS = [
    {"src": "search_products", "dst": "place_order", "kind": "dataflow", "weight": 1.0, "confirmed": True,
     "reason": "output 'product_id' feeds required input"},
    {"src": "place_order", "dst": "get_weather", "kind": "similar", "weight": 0.5, "confirmed": True,
     "reason": "strongly similar (cos 0.61)"},
]
NAMES = {t.name for t in TOOLS}


class Scripted:
    """Scripted stand-in for LLMClient.chat (our loop is under test): `reply` is a text or a
    function of the request's messages."""

    def __init__(self, reply):
        self.reply, self.calls = reply, 0

    async def chat(self, messages, **kw) -> ChatReply:
        self.calls += 1
        text = self.reply(messages) if callable(self.reply) else self.reply
        return ChatReply(content=text, raw={}, usage={"prompt_tokens": 50, "completion_tokens": 5}, latency_s=0.0,
                         finish_reason="stop")


GOOD = json.dumps({"edges": [{"index": 0, "real": True, "reason": "the product id found is ordered"},
                             {"index": 1, "real": False, "reason": "weather has nothing to do with orders"}],
                   "drop": [{"name": "get_weather", "reason": "unrelated to shopping"}]})


def test_parse_decision_is_strict():
    assert parse_decision(GOOD, 2, NAMES)["drop"][0]["name"] == "get_weather"
    for bad, msg in [("Sure: " + GOOD, "not valid JSON"),
                     (GOOD.replace('{"index": 1', '{"index": 0'), "repeated [0]"),
                     (GOOD.replace('"get_weather", "reason"', '"get_wether", "reason"'), "unknown tools"),
                     (json.dumps({"edges": [{"index": 0, "real": "yes", "reason": "x"},
                                            {"index": 1, "real": True, "reason": "x"}], "drop": []}), "schema"),
                     (json.dumps({"edges": [{"index": 0, "real": True, "reason": ""},
                                            {"index": 1, "real": True, "reason": ""}],
                                  "drop": [{"name": n, "reason": "x"} for n in NAMES]}), "drops every tool")]:
        with pytest.raises(LLMFormatError, match=re.escape(msg)) as e:
            parse_decision(bad, 2, NAMES)
        assert e.value.raw == bad


def test_llm_decisions_and_reasons_are_recorded():
    res = asyncio.run(llm_dependency_check(Scripted(GOOD), TOOLS, DECISIONS))
    assert res["by"] == "llm" and res["usage"]["prompt_tokens"] == 50
    d0, d1 = res["decisions"]
    assert d0["confirmed"] and d0["by"] == "llm" and "ordered" in d0["reason"]
    assert not d1["confirmed"] and d1["rule_confirmed"] and "weather" in d1["reason"]
    assert res["drop"] == [{"name": "get_weather", "reason": "unrelated to shopping", "by": "llm"}]


def test_format_error_falls_back_to_the_rule_decisions():
    res = asyncio.run(llm_dependency_check(Scripted("All edges look fine to me!"), TOOLS, DECISIONS))
    assert res["by"] == "rules" and res["drop"] is None
    assert [d["confirmed"] for d in res["decisions"]] == [True, True]
    assert all(d["by"] == "rules" for d in res["decisions"])
    assert "not valid JSON" in res["fallback_reason"] and res["raw"] == "All edges look fine to me!"


def _all_real_drop_cancel(messages) -> str:
    """Computed script: confirm every listed edge, drop cancel_order when it is a member."""
    user = messages[1]["content"]
    n = len(re.findall(r"^\d+\. ", user, re.M))
    drop = [{"name": "cancel_order", "reason": "unrelated"}] if "- cancel_order:" in user else []
    return json.dumps({"edges": [{"index": i, "real": True, "reason": "ok"} for i in range(n)], "drop": drop})


def test_find_domains_hook_applies_the_llm_check():
    """The LLM's decision replaces the rule-based one: the rules drop get_weather (far from the
    rest), the scripted model keeps it and drops cancel_order instead."""
    tools = TOOLS + [tool("get_product", "Get a product's details.", {"product_id": "product"}),
                     tool("cancel_order", "Cancel an order.", {"order_id": "order"})]
    cfg = DiscoverConfig(embedding="fast", min_size=3, group_min_sim=-1, attach_min_sim=-1).resolved()
    vecs, _ = embed_tools(tools, cfg.embedding)
    g = build_graph(tools, vecs, cfg.threshold, cfg.top_k, cfg.flow_min_sim)
    base, _ = find_domains(tools, vecs, g, cfg)
    assert [r["names"] for r in base] == [["cancel_order", "get_product", "place_order", "search_products"]]
    checker = LLMDependencyChecker(Scripted(_all_real_drop_cancel))
    records, report = find_domains(tools, vecs, g, cfg, checker=checker)
    assert [r["names"] for r in records] == [["get_product", "get_weather", "place_order", "search_products"]]
    dropped = [d for c in report["dependency_check"] for d in c["dropped"]]
    assert dropped == [{"name": "cancel_order", "tool": tools[4].id, "reason": "unrelated", "by": "llm"}]
    decided = [d for c in report["dependency_check"] for d in c["edge_decisions"]]
    assert decided and all(d["by"] == "llm" for d in decided)
    assert checker.stats["domains"] == 1 and checker.stats["by_llm"] == 1 and checker.stats["fallbacks"] == 0

    bad = LLMDependencyChecker(Scripted("no"))
    records2, report2 = find_domains(tools, vecs, g, cfg, checker=bad)
    assert records2 == base and bad.stats["fallbacks"] == bad.stats["domains"] == 1  # the rules decide
    assert all(d["by"] == "rules" and "not valid JSON" in d["fallback_reason"]
               for c in report2["dependency_check"] for d in c["edge_decisions"])


def test_discover_reports_the_llm_checks_cost(tmp_path):
    """`agentscaler discover --llm-check`'s stage: requests, tokens and seconds in the summary (and on disk)."""
    tools = TOOLS + [tool("get_product", "Get a product's details.", {"product_id": "product"}),
                     tool("cancel_order", "Cancel an order.", {"order_id": "order"})]
    ws = Workspace(tmp_path / "ws")
    model = Scripted(_all_real_drop_cancel)
    cfg = DiscoverConfig(embedding="fast", min_size=3, group_min_sim=-1, attach_min_sim=-1)
    summary = discover(ws, tools=tools, cfg=cfg, draw=False, checker=LLMDependencyChecker(model))
    cost = summary["llm_check"]
    assert cost["requests"] == cost["domains"] == model.calls >= 1
    assert cost["prompt_tokens"] == 50 * model.calls and cost["completion_tokens"] == 5 * model.calls
    assert cost["seconds"] >= 0 and cost["by_llm"] == model.calls
    assert json.loads((ws.graph_dir / "report.json").read_text())["summary"]["llm_check"] == cost
    assert "llm_check" not in discover(ws, tools=tools, cfg=cfg, draw=False)  # off by default


@pytest.mark.llm
def test_real_smollm2_check_completes_with_a_recorded_decision(local_llm):
    """SmolLM2-135M may or may not produce a usable decision; either outcome must be recorded."""
    async def go():
        async with LLMClient(local_llm, timeout=120) as client:
            return await llm_dependency_check(client, TOOLS, DECISIONS, max_tokens=48)

    res = asyncio.run(go())
    assert res["by"] in ("llm", "rules") and len(res["decisions"]) == 2
    if res["by"] == "llm":
        assert all(d["by"] == "llm" and isinstance(d["confirmed"], bool) for d in res["decisions"])
    else:
        assert res["fallback_reason"] and [d["confirmed"] for d in res["decisions"]] == [True, True]
