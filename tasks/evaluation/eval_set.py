"""The evaluation set: a fixed list of held-out scenarios that every compared model is scored on.

Why a file: base and trained model (and every point of the scaling curve) must see exactly the
same scenarios, and a later run must be able to re-score against them. `choose_eval_set` picks
them once and writes `<ws>/reports/eval-set-<name>.json`; `load_eval_set` reads it back.

How they are picked (deterministic for a workspace and the arguments):
- only held-out domains (domain_split's hash; never trained on), tau2 verticals excluded (tau2's
  test split is scored apart, as tau2 scores it);
- domains whose agent prompt (system text + tool schemas, counted with the SFT tokenizer) fits
  in `max_prompt_tokens`, so a conversation fits the local server's context on CPU; the limit and
  what it excluded are written into the file (selection, not shrinking: the count asked for is met
  or the call fails);
- with `max_domains`, only that many of them: the ones with the shortest prompts (a small
  evaluation, such as the demo's, on few domains with short prompts: each domain's prefix is
  processed once and served from the server's prompt cache for its other scenarios);
- the same number of scenarios from every chosen domain (round-robin, so no domain dominates),
  alternating single-call and multi-call scenarios where a domain has both, ordered by a hash of
  the scenario id (not by file order).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agentscaler.artifacts import load_scenarios
from agentscaler.hashing import content_hash
from agentscaler.models import Scenario
from agentscaler.workspace import Workspace, atomic_write_json
from envs.spec import DomainSpec
from tasks.rollouts.agent import domain_setup
from tasks.scenarios.build import is_tau2
from training.gguf_convert import load_tokenizer


class EvalSetError(ValueError):
    """The workspace cannot give the evaluation set asked for (too few held-out scenarios or domains)."""


def eval_set_path(ws: Workspace, name: str = "heldout") -> Any:
    return ws.reports_dir / f"eval-set-{name}.json"


def prompt_tokens(ws: Workspace, domain: str, tokenizer: Any) -> int:
    """Tokens of the agent's fixed prefix in a domain: system prompt + tool schemas (the SFT template)."""
    spec = DomainSpec.load(ws.domain_dir(domain))
    tools, system = domain_setup(spec)
    msgs = [{"role": "system", "content": system}]
    return len(tokenizer.apply_chat_template(msgs, tools=tools, tokenize=True, return_dict=True)["input_ids"])


def _order(s: Scenario) -> str:
    return content_hash({"eval_set": s.id}, 12)


def _interleave(rows: list[Scenario]) -> list[Scenario]:
    """Single-call and multi-call scenarios alternating (each group in hash order)."""
    single = sorted((s for s in rows if len(s.gold_calls) == 1), key=_order)
    multi = sorted((s for s in rows if len(s.gold_calls) > 1), key=_order)
    out: list[Scenario] = []
    for i in range(max(len(single), len(multi))):
        out += [g[i] for g in (single, multi) if i < len(g)]
    return out


def choose_eval_set(ws: Workspace, scenarios: int = 100, min_domains: int = 20, max_prompt_tokens: int = 2048,
                    name: str = "heldout", tokenizer: Any | None = None,
                    max_domains: int | None = None) -> dict[str, Any]:
    """Pick and write the evaluation set; returns its record (ids, domains, counts, criteria).

    Raises EvalSetError when fewer than `min_domains` held-out domains fit, or they hold fewer than
    `scenarios` held-out scenarios."""
    tokenizer = tokenizer or load_tokenizer()
    candidates: dict[str, list[Scenario]] = {}
    too_long: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for d in ws.domain_ids():
        if is_tau2(d):
            continue
        rows = [s for s in load_scenarios(ws, d) if s.split == "heldout"]
        if not rows:
            continue
        n = prompt_tokens(ws, d, tokenizer)
        if n > max_prompt_tokens:
            too_long[d] = n
            continue
        sizes[d] = n
        candidates[d] = _interleave(rows)
    if len(candidates) < min_domains:
        raise EvalSetError(f"{len(candidates)} held-out domains fit {max_prompt_tokens} prompt tokens "
                           f"({len(too_long)} more do not), fewer than the {min_domains} asked for")
    fitting = len(candidates)
    if max_domains is not None:
        if max_domains < min_domains:
            raise EvalSetError(f"max_domains {max_domains} is below min_domains {min_domains}")
        shortest = sorted(candidates, key=lambda d: (sizes[d], content_hash({"eval_domain": d}, 12)))[:max_domains]
        candidates = {d: candidates[d] for d in shortest}
    available = sum(len(v) for v in candidates.values())
    if available < scenarios:
        raise EvalSetError(f"{available} held-out scenarios in {len(candidates)} domains, fewer than {scenarios}")
    chosen: list[Scenario] = []
    order = sorted(candidates, key=lambda d: content_hash({"eval_domain": d}, 12))
    i = 0
    while len(chosen) < scenarios:
        for d in order:
            if i < len(candidates[d]) and len(chosen) < scenarios:
                chosen.append(candidates[d][i])
        i += 1
    domains = sorted({s.domain for s in chosen})
    record = {
        "name": name, "scenario_ids": [s.id for s in chosen], "domains": domains,
        "scenarios": len(chosen), "by_length": {str(n): c for n, c in sorted(Counter(len(s.gold_calls) for s in chosen).items())},
        "single_call": sum(len(s.gold_calls) == 1 for s in chosen),
        "multi_call": sum(len(s.gold_calls) > 1 for s in chosen),
        "read_only": sum(s.read_only for s in chosen),
        "prompt_tokens": {d: sizes[d] for d in domains},
        "criteria": {"split": "heldout", "tau2": "excluded (scored apart)", "max_prompt_tokens": max_prompt_tokens,
                     "min_domains": min_domains, "max_domains": max_domains, "domains_fitting": fitting,
                     "domains_over_prompt_limit": len(too_long)},
    }
    atomic_write_json(eval_set_path(ws, name), record)
    return record


def load_eval_set(ws: Workspace, name: str = "heldout") -> dict[str, Any]:
    path = eval_set_path(ws, name)
    if not path.exists():
        raise FileNotFoundError(f"no evaluation set {path}: choose one first (flows.closed_loop / choose_eval_set)")
    return json.loads(path.read_text("utf-8"))
