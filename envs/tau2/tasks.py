"""tau2's tasks.json as our Scenarios: gold calls = the task's evaluation_criteria.actions,
executed in our sandboxed environment from a fresh seed; gold hash and diff from that run.

Split: tau2's "train" split ids become split="train", all others "heldout" (tau2's "test").
A task without actions is skipped (its checks are natural-language assertions only). Some of
tau2's gold actions fail in tau2 itself too (e.g. an item id passed as a product id; checked
call for call by the equivalence test): a failing call changes no state, so it is left out of
the gold calls, counted and listed in the report; the rest of the task is kept.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler.artifacts import SCENARIOS
from agentscaler.hashing import content_hash
from agentscaler.models import GoldCall, Scenario
from agentscaler.workspace import atomic_write_jsonl
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec
from envs.tau2.source import data_dir


def _intent(us: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ins = us.get("instructions")
    if isinstance(ins, str):
        return ins, {}
    ins = ins or {}
    intent = " ".join(str(ins[k]) for k in ("reason_for_call", "task_instructions") if ins.get(k))
    facts = {k: ins[k] for k in ("known_info", "unknown_info") if ins.get(k)}
    if us.get("persona"):
        facts["persona"] = us["persona"]
    return intent, facts


def tau2_scenarios(name: str, domain_dir: Path, limit: int | None = None, with_diff: bool = True,
                   write: bool = True) -> tuple[list[Scenario], dict[str, Any]]:
    """Convert tau2's tasks for domain `name` (built in domain_dir); writes scenarios.jsonl."""
    domain_dir = Path(domain_dir)
    spec = DomainSpec.load(domain_dir)
    kinds = {t.name: t.kind for t in spec.tools}
    tasks = json.loads((data_dir(name) / "tasks.json").read_text("utf-8"))
    split_file = data_dir(name) / "split_tasks.json"
    train = set(json.loads(split_file.read_text("utf-8")).get("train", [])) if split_file.exists() else set()
    out: list[Scenario] = []
    skipped: Counter[str] = Counter()
    errors: list[str] = []
    dropped: list[str] = []
    with Environment.open(domain_dir, unsafe=unsafe_from_env()) as env:
        env.reset()
        seed_hash = env.state_hash()
        for task in tasks[:limit] if limit else tasks:
            tid = str(task.get("id"))
            actions = ((task.get("evaluation_criteria") or {}).get("actions")) or []
            if not actions:
                skipped["no_actions"] += 1
                continue
            env.reset()
            gold: list[GoldCall] = []
            for a in actions:
                args = a.get("arguments") or {}
                if a.get("name") not in kinds:
                    errors.append(f"task {tid}: unknown tool {a.get('name')!r}")
                    break
                r = env.call(a["name"], args)
                if not r.ok:
                    dropped.append(f"task {tid}: gold call {a['name']} fails (as in tau2): {r.error}")
                    continue
                gold.append(GoldCall(name=a["name"], arguments=args, output=r.content, kind=kinds[a["name"]]))
            if errors and errors[-1].startswith(f"task {tid}:"):
                skipped["unknown_tool"] += 1
                continue
            if not gold:
                skipped["no_successful_calls"] += 1
                continue
            gold_hash = env.state_hash()
            intent, facts = _intent(task.get("user_scenario") or {})
            sid = content_hash({"domain": spec.id, "gold_calls": [[g.name, g.arguments] for g in gold],
                                "gold_hash": gold_hash, "tau2_task": tid})
            out.append(Scenario(id=sid, domain=spec.id, read_only=all(g.kind == "read" for g in gold),
                                intent=intent or f"tau2 {name} task {tid}", user_facts={**facts, "tau2_task_id": tid},
                                gold_calls=gold, gold_hash=gold_hash, seed_hash=seed_hash,
                                gold_diff=env.diff() if with_diff else [],
                                split="train" if tid in train else "heldout"))
    if write:
        atomic_write_jsonl(domain_dir / SCENARIOS, [s.model_dump() for s in out])
    return out, {"scenarios": len(out), "skipped": dict(skipped), "errors": errors,
                 "dropped_failed_calls": dropped}
