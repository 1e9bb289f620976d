"""The entity and verb contract, for a synthesizer that is not the rules (the LLM synthesizer).

The rule-based plan (tasks.environments.plan) decides what a domain's environment must be: one
table per entity with its key, each tool's kind and action, the states a move goes between, what
a creation consumes and what money moves. An LLM writes its own schema and code, but is held to
the same contract: the plan goes into its prompts (`entities_text`, `semantics_text`) and its
schema reply is checked against it (`contract_problems`) before any code is asked for; the built
environment then meets the same quality checks as the rules' (tasks.environments.quality).
"""

from __future__ import annotations

from typing import Any

from agentscaler.naming import is_tag
from envs.spec import TableSpec
from tasks.environments.plan import Entity, Plan
from tasks.environments.verbs import NOUNLIKE, VERBS


def entities_text(plans: list[Plan], entities: dict[str, Entity]) -> str:
    """The entities a schema must have: table, key, states, counters, balance."""
    out = []
    for _, e in sorted(entities.items()):
        extra = []
        if e.statuses:
            extra.append(f"status one of {e.statuses} (new records start {e.statuses[0]!r})")
        for col, states in e.extra_states.items():
            extra.append(f"{col} one of {states}")
        if e.quantity:
            extra.append(f"{e.quantity} integer (taken by bookings and purchases, given back on cancel)")
        if e.balance:
            extra.append(f"{e.balance} real (money in and out)")
        refs = [f"{c.name} -> {c.foreign_key}" for c in e.columns.values() if c.foreign_key]
        if refs:
            extra.append("belongs to: " + ", ".join(refs))
        out.append(f"- {e.table}: key {e.pk}" + ("; " + "; ".join(extra) if extra else ""))
    return "\n".join(out)


def _effect_text(eff: dict[str, Any], entities: dict[str, Entity]) -> str:
    k = eff["kind"]
    if k == "assign":
        v = "the new record's id" if eff["value"] == "$id" else repr(eff["value"])
        return f"sets {eff['column']} to {v} when not given (a read looks records up by it)"
    if k == "consume":
        r = entities[eff["ref"]]
        by = f"by {eff['amount']}" if eff.get("amount") else "by 1"
        how = f"the {r.name} given by {eff['param']}" if eff.get("param") else \
            f"the {r.name} whose {', '.join(c for _, c in eff['match'])} match the arguments"
        return (f"takes {r.quantity} of {how} {by}; ToolError 'not enough {r.quantity}' when short; "
                f"stores the {r.pk}")
    if k == "restore":
        return f"gives the {eff['column']} back to the {eff['ref']} it was taken from"
    if k == "charge":
        return f"debits {eff['column']} of the {eff['ref']} by {eff['amount']}; ToolError 'insufficient {eff['column']}'"
    if k == "balance":
        return (f"{'subtracts' if eff['sign'] < 0 else 'adds'} {eff['amount'] or 'the amount'} "
                f"{'from' if eff['sign'] < 0 else 'to'} {eff['column']}"
                + ("; ToolError 'insufficient ...' when short" if eff["sign"] < 0 else ""))
    if k == "transfer":
        return f"moves {eff['amount']} of {eff['column']} from {eff['from']} to {eff['to']}; ToolError when short"
    if k == "stamp":
        return f"sets {eff['column']} to db.now()"
    if k == "fee":
        return f"sets {eff['column']} from the hours since {eff['since']} times {eff['rate']}"
    if k == "late_fee":
        return f"sets {eff['column']} for each day past {eff['due']}"
    if k == "due":
        return f"sets {eff['column']} {eff['days']} days after db.now()"
    if k == "extend":
        return f"pushes {eff['column']} later by {eff['by'] or eff['default']} {eff['unit']}"
    if k == "extend_fee":
        return f"adds the extra {eff['rate']} to {eff['column']}"
    if k == "rate":
        return f"copies {eff['column']} from the {eff['ref']} given by {eff['param']}"
    if k == "refill":
        return f"uses one of {eff['column']}; ToolError when none is left"
    return k


def semantics_text(plans: list[Plan], entities: dict[str, Entity]) -> str:
    """What each tool must do: its action on its entity, state moves and effects."""
    out = []
    for pl in plans:
        e = entities[pl.entity]
        what = f"{pl.action} on {e.table}"
        if pl.action == "status":
            what += f": moves {pl.status_col} from {list(pl.status_from)} to {pl.status_to!r}, else ToolError (wrong state)"
        effects = [_effect_text(x, entities) for x in pl.effects]
        out.append(f"- {pl.name} [{pl.kind}]: {what}" + ("; " + "; ".join(effects) if effects else ""))
    return "\n".join(out)


def contract_problems(tables: list[TableSpec], kinds: dict[str, str], plans: list[Plan],
                      entities: dict[str, Entity]) -> list[str]:
    """How a schema reply breaks the contract: a missing entity table or key, a table named by a
    verb or a tag, a tool kind other than the verb's (tools without a verb may take either)."""
    problems: list[str] = []
    by_name = {t.name: t for t in tables}
    for _, e in sorted(entities.items()):
        t = by_name.get(e.table)
        if t is None:
            problems.append(f"table {e.table} (entity {e.name}, key {e.pk}) is missing")
        elif t.primary_key[:1] != [e.pk]:
            problems.append(f"table {e.table} must have primary key [{e.pk!r}], not {t.primary_key}")
    for t in tables:
        words = t.name.split("_")
        if any(is_tag(w) for w in words) or any(w in VERBS and VERBS[w] != "read" and w not in NOUNLIKE
                                                for w in words):
            problems.append(f"table name {t.name!r} is not a noun (no verbs or tags in table names)")
    for pl in plans:
        if pl.kind_reason != "default" and kinds.get(pl.name) not in (None, pl.kind):
            problems.append(f"tool {pl.name} is a {pl.kind} ({pl.verb or 'its output'}: {pl.action}), "
                            f"not a {kinds[pl.name]}")
    return problems
