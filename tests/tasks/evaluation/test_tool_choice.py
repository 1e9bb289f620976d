"""Tool-choice scoring: the one-pass tree of candidates against a plain forward per candidate."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from agentscaler.models import GoldCall, Scenario  # noqa: E402
from tasks.evaluation.tool_choice import CALL_HEAD, NAME_TAIL, choice_items, score_domain  # noqa: E402
from training.gguf_convert import load_tokenizer  # noqa: E402
from training.tiny import TinyModelConfig, build_tiny_model  # noqa: E402


def tool(name: str, desc: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": desc,
                                             "parameters": {"type": "object", "properties": {}}}}


# names that share prefixes (get_user / get_user_orders), start with punctuation or a digit, or
# repeat another's first tokens: every way the candidates' tokens can part
TOOLS = [tool("get_user", "Look up a user by id."), tool("get_user_orders", "List the orders a user placed."),
         tool("_cancel", "Cancel an order."), tool("2fa_reset", "Reset two-factor login."),
         tool("refundOrder", "Refund an order to the card it was paid with.")]


def scenario(sid: str, intent: str, gold: str | None, domain: str = "shop") -> Scenario:
    calls = [GoldCall(name=gold, arguments={})] if gold else []
    return Scenario(id=sid, domain=domain, read_only=True, intent=intent, gold_calls=calls, gold_hash="g",
                    seed_hash="g", split="heldout")


def full_scores(model, tok, system: str, request: str) -> list[float]:
    """The reference: each candidate's whole text through the model with no cache, log P of the
    tokens after the point where the candidates' token sequences part."""
    text = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": request}],
                                   tools=TOOLS, add_generation_prompt=True, tokenize=False)
    seqs = [tok(text + CALL_HEAD + t["function"]["name"] + NAME_TAIL, add_special_tokens=False)["input_ids"]
            for t in TOOLS]
    part = next(i for i in range(min(map(len, seqs))) if len({s[i] for s in seqs}) > 1)
    out = []
    with torch.no_grad():
        for s in seqs:
            lps = torch.log_softmax(model(torch.tensor([s])).logits[0].float(), -1)
            out.append(sum(lps[i - 1, s[i]].item() for i in range(part, len(s))))
    return out


def test_tree_scores_equal_a_plain_forward_per_candidate():
    tok = load_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(num_hidden_layers=2)).eval()
    system = "You are a customer-service agent for the shop service."
    items, _ = choice_items([scenario("a", "Please refund my order 42.", "refundOrder"),
                             scenario("b", "Show me the orders of user 7", "get_user_orders")], {"shop": TOOLS})
    rows = score_domain(model, tok, system, TOOLS, items)
    assert [r["scenario_id"] for r in rows] == ["a", "b"]
    for it, row in zip(items, rows):
        want = full_scores(model, tok, system, it.request)
        assert row["scores"] == pytest.approx(want, abs=2e-3)
        assert row["pick"] == it.tools[max(range(len(want)), key=want.__getitem__)]
        assert row["right"] == (row["pick"] == it.gold)
        top = max(want)
        gold_i = it.tools.index(it.gold)
        assert row["gold_prob"] == pytest.approx(math.exp(want[gold_i] - top) / sum(math.exp(x - top) for x in want),
                                                 abs=1e-3)
        assert row["gold_rank"] == 1 + sum(x > want[gold_i] for x in want)
    # the text-match reference rides along: "refund ... order" is refundOrder's description
    assert rows[0]["text_match"] is True


def test_choice_items_skips_what_cannot_be_scored_and_counts_why():
    tools = {"shop": TOOLS, "solo": [tool("only", "The one tool.")], "dup": [tool("x", "a"), tool("x", "b")]}
    items, skipped = choice_items([
        scenario("ok", "refund", "refundOrder"), scenario("nogold", "hi", None),
        scenario("solo", "do it", "only", domain="solo"), scenario("gone", "x", "deleted_tool"),
        scenario("dup", "x", "x", domain="dup"), scenario("nodomain", "x", "y", domain="missing")], tools)
    assert [i.scenario_id for i in items] == ["ok"]
    assert items[0].tools == [t["function"]["name"] for t in TOOLS] and items[0].gold == "refundOrder"
    assert skipped == {"no_gold_calls": 1, "one_tool": 1, "gold_not_listed": 1, "duplicate_tool_names": 1,
                       "no_tools": 1}
