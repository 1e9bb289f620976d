"""Which tool would the model call first? A likelihood measure of tool choice on held-out scenarios.

Why: held-out pass^1 on 100 trials moves in steps of 1 point with a +-9-point interval, and the
trained models lose most trials at the first tool (tasks.evaluation.evaluate.diagnose). This scores
that one decision on every held-out scenario, with no decoding and no rollout: the agent's prompt
(the domain's system prompt and tool list, then the user's first message, as the scripted user says
it) is followed by the opening of a tool call, and each of the domain's tools is scored by the
log-probability of its name and the text after it (`<name>", "arguments": `). The model's pick is
the tool with the highest total; it is right when that is the scenario's first gold tool.

This is the model's choice *if* it calls a tool straight away (what a grammar that forces a call
would give, over whole names), so it is not pass^1 and is never reported as pass^1. Its value is
resolution: hundreds of held-out scenarios in dozens of domains instead of 100 trials, scored in
minutes, with a domain-level bootstrap interval (intervals.domain_interval).

Cost: the domain's system turn (the tool list: most of the tokens) is run once per domain and kept
in the model's KV cache; per scenario only the user's message and the candidates' names run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentscaler.chat_template import TOOL_CALL_OPEN
from agentscaler.models import Scenario
from tasks.evaluation.evaluate import text_match_tool

CALL_HEAD = TOOL_CALL_OPEN + '\n{"name": "'  # what the template writes before a tool's name
NAME_TAIL = '", "arguments": '  # and after it: scoring the tail too ends the name (get vs get_user)


class ChoiceItem(BaseModel):
    """One held-out scenario's first decision: the prompt's parts and the right answer."""

    model_config = ConfigDict(extra="forbid")
    scenario_id: str
    domain: str
    request: str  # the user's first message (the scripted user opens with the scenario's intent)
    gold: str  # the first gold call's tool
    tools: list[str]  # the candidates, in the order the agent sees them


def choice_items(scenarios: Iterable[Scenario], domain_tools: dict[str, list[dict[str, Any]]]
                 ) -> tuple[list[ChoiceItem], dict[str, int]]:
    """Items for the scenarios whose domain has tools; skipped ones counted by reason."""
    items: list[ChoiceItem] = []
    skipped: dict[str, int] = {}
    for s in scenarios:
        tools = domain_tools.get(s.domain)
        names = [t["function"]["name"] for t in tools or []]
        why = ("no_tools" if not names else "no_gold_calls" if not s.gold_calls
               else "one_tool" if len(names) < 2 else "duplicate_tool_names" if len(set(names)) < len(names)
               else "gold_not_listed" if s.gold_calls[0].name not in names else None)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        items.append(ChoiceItem(scenario_id=s.id, domain=s.domain, request=s.intent, gold=s.gold_calls[0].name,
                                tools=names))
    return items, skipped


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(x) for x in seqs)
    for i in range(n):
        if any(x[i] != seqs[0][i] for x in seqs):
            return i
    return n


def _crop_to(cache: Any, length: int) -> None:
    """Drop the cache's entries past `length` (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _candidate_scores(model: Any, cache: Any, base_len: int, seqs: list[list[int]]) -> list[float]:
    """log P(candidate's tokens | cached system turn + the shared tokens), for every candidate in one
    forward pass: the shared tokens (user turn, call head) and each candidate's own tokens go in as
    one sequence whose attention mask lets a candidate see the shared part and itself only (a tree),
    with each token at the position it has in its own sequence. The cache is cropped back after."""
    import torch

    shared = _common_prefix(seqs)
    rests = [s[shared:] for s in seqs]  # each >= 1 token: names differ and the tail ends every name
    inputs = list(seqs[0][:shared])
    positions = list(range(base_len, base_len + shared))
    spans: list[int] = []
    for r in rests:
        spans.append(len(inputs))
        inputs += r[:-1]  # the last token is only predicted, never fed
        positions += range(base_len + shared, base_len + shared + len(r) - 1)
    q = len(inputs)
    mask = torch.zeros(q, base_len + q, dtype=torch.bool)
    mask[:, :base_len] = True
    mask[shared:, base_len:base_len + shared] = True  # every candidate sees all the shared tokens
    mask[:shared, base_len:base_len + shared] = torch.ones(shared, shared, dtype=torch.bool).tril()
    for r, at in zip(rests, spans):
        n = len(r) - 1
        mask[at:at + n, base_len + at:base_len + at + n] = torch.ones(n, n, dtype=torch.bool).tril()
    logits = model(torch.tensor([inputs]), attention_mask=mask[None, None], position_ids=torch.tensor([positions]),
                   cache=cache, use_cache=True).logits[0]
    _crop_to(cache, base_len)
    lps = torch.log_softmax(logits.float(), -1)
    return [lps[shared - 1, r[0]].item() + sum(lps[at + j, r[j + 1]].item() for j in range(len(r) - 1))
            for r, at in zip(rests, spans)]


def score_domain(model: Any, tokenizer: Any, system: str, tools: list[dict[str, Any]],
                 items: list[ChoiceItem]) -> list[dict[str, Any]]:
    """Score every item of one domain (same system prompt and tools) with `model` (HF causal LM).

    The system turn runs once; each item then takes one forward pass on top of it (its user turn,
    the call head and every candidate, _candidate_scores). Token sequences are
    built by tokenizing the whole text per candidate and splitting where the candidates part, so a
    merge across the name's boundary cannot shift the scores."""
    import torch  # the [train] extra: heavy, loaded on use

    def render(request: str) -> str:
        return tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": request}],
                                             tools=tools, add_generation_prompt=True, tokenize=False)

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    first = render(items[0].request)
    cut = first.index("<|im_start|>user")  # end of the system turn: the same text for every item
    head_ids = ids(first[:cut])
    out: list[dict[str, Any]] = []
    with torch.no_grad():
        cache = model(torch.tensor([head_ids]), use_cache=True).cache
        base_len = len(head_ids)
        for it in items:
            text = render(it.request)
            if not text.startswith(first[:cut]):
                raise ValueError(f"{it.domain}/{it.scenario_id}: the system turn renders differently per request")
            seqs = [ids(text + CALL_HEAD + name + NAME_TAIL) for name in it.tools]
            if any(s[:base_len] != head_ids for s in seqs):
                raise ValueError(f"{it.domain}/{it.scenario_id}: the tokens of the system turn change after it")
            scores = _candidate_scores(model, cache, base_len, [s[base_len:] for s in seqs])
            top = max(scores)
            z = sum(math.exp(x - top) for x in scores)
            gold_i = it.tools.index(it.gold)
            pick = it.tools[scores.index(top)]
            out.append({"scenario_id": it.scenario_id, "domain": it.domain, "gold": it.gold, "pick": pick,
                        "right": pick == it.gold, "n_tools": len(it.tools),
                        "gold_rank": 1 + sum(x > scores[gold_i] for x in scores),
                        "gold_prob": round(math.exp(scores[gold_i] - top) / z, 6),
                        "scores": [round(x, 4) for x in scores],
                        "text_match": text_match_tool(it.request, tools) == it.gold})
    return out
