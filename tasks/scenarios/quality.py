"""How much a domain's scenarios teach: the mix of kinds, chains, and gold reads that find something.

Computed from the scenarios alone (gold calls, outputs, diffs), so it applies to any synthesizer:
- kind of a scenario: `single` (one call), `chained_read` (a later call uses an id an earlier read
  returned: look up, then act on what was found), `create_then_change` (a later call uses an entity an earlier write
  created or changed), `unchained` (several calls, none feeds another);
- chain share: chained scenarios among the multi-call ones;
- gold read calls whose output is not empty (a search that finds nothing teaches the agent to
  search and find nothing), and scenarios whose every read is empty.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentscaler.models import Scenario
from agentscaler.naming import is_id_name

KINDS = ("single", "chained_read", "create_then_change", "unchained")


def is_empty(output: Any) -> bool:
    """None, "", [], {} or a dict whose every value is empty (`{"items": []}`, `{"results": None}`)."""
    if output is None or output == "" or output == [] or output == {}:
        return True
    if isinstance(output, dict):
        return all(v is None or v == "" or v == [] or v == {} for v in output.values())
    return False


def _values(obj: Any, out: set[str], depth: int = 0) -> None:
    """The values an output holds that name something: strings of 2+ characters, and any scalar
    under an id-like key (`id`, `*_id`)."""
    if depth > 5:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (str, int)) and not isinstance(v, bool) and (is_id_name(str(k)) or isinstance(v, str)):
                if is_id_name(str(k)) or len(str(v)) >= 2:
                    out.add(str(v))
            elif isinstance(v, (dict, list)):
                _values(v, out, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:100]:
            if isinstance(v, str) and len(v) >= 2:
                out.add(v)
            else:
                _values(v, out, depth + 1)


def _arg_values(obj: Any, out: set[str]) -> None:
    if isinstance(obj, (str, int)) and not isinstance(obj, bool):
        out.add(str(obj))
    elif isinstance(obj, list):
        for v in obj:
            _arg_values(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _arg_values(v, out)


def scenario_kind(s: Scenario) -> str:
    """single | chained_read | create_then_change | unchained (see the module docstring)."""
    calls = s.gold_calls
    if len(calls) <= 1:
        return "single"
    chained_write = chained_read = False
    given: set[str] = set()
    _arg_values(s.user_facts, given)
    for j in range(1, len(calls)):
        used: set[str] = set()
        _arg_values(calls[j].arguments, used)
        used -= given
        for i in range(j):
            found: set[str] = set()
            _values(calls[i].output, found)
            if found & used:
                if calls[i].kind == "write":
                    chained_write = True
                else:
                    chained_read = True
    if chained_write:
        return "create_then_change"
    if chained_read:
        return "chained_read"
    return "unchained"


def scenario_quality(scenarios: list[Scenario]) -> dict[str, Any]:
    """Counts of one domain's (or many domains') scenarios; shares are None where nothing is counted."""
    kinds = Counter(scenario_kind(s) for s in scenarios)
    multi = sum(n for k, n in kinds.items() if k != "single")
    chained = kinds["chained_read"] + kinds["create_then_change"]
    reads = [c for s in scenarios for c in s.gold_calls if c.kind == "read"]
    nonempty = sum(not is_empty(c.output) for c in reads)
    with_reads = [s for s in scenarios if any(c.kind == "read" for c in s.gold_calls)]
    all_empty = sum(all(is_empty(c.output) for c in s.gold_calls if c.kind == "read") for s in with_reads)
    return {
        "scenarios": len(scenarios), "kinds": {k: kinds.get(k, 0) for k in KINDS},
        "multi_call": multi, "chained": chained, "chain_share": round(chained / multi, 4) if multi else None,
        "gold_reads": len(reads), "gold_reads_nonempty": nonempty,
        "nonempty_read_share": round(nonempty / len(reads), 4) if reads else None,
        "scenarios_all_reads_empty": all_empty,
        "read_only": sum(s.read_only for s in scenarios),
    }
