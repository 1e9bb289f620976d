"""Simulated users: a scripted user (no LLM) and an LLM user. Both hold the scenario's intent.

The user never sees the tools or tool results, only the agent's text. A user ends the
conversation by sending STOP (`###STOP###`). The rollout engine may refuse a stop once when
the agent has announced an action it has not performed yet (see tasks.rollouts.engine).

ScriptedUser: states the intent, answers the agent's questions from `user_facts`, and stops after
`patience` turns or when it judges the task done. How it judges depends on `goal_check`:
- training rollouts (goal_check=True): the engine passes `goal_reached` (state hash == gold hash
  for write scenarios, or the agent's reply holds the gold outputs' key values for read-only ones),
  a shortcut that keeps data collection cheap;
- evaluation (goal_check=False, forced by tasks.evaluation.evaluate): the user never sees the gold
  state, like tau2's users; it stops when the agent, having used a tool, answers with a statement
  (no question, no announced action still to come). Evaluation numbers are measured this way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentscaler.hashing import content_hash
from agentscaler.llm import LLMClient
from agentscaler.models import Scenario

STOP = "###STOP###"
_ANNOUNCE_RE = re.compile(
    r"\b(i will|i'll|i am going to|i'm going to|let me|i am now|i'm now|i'm (?:placing|cancell?ing|updating|processing|"
    r"changing|booking|creating|deleting)|i am (?:placing|cancell?ing|updating|processing|changing|booking|creating|"
    r"deleting)|one moment|please wait|hold on|proceeding (?:to|with))\b", re.IGNORECASE)
NUDGE = "Please go ahead and do that now; I'll wait."
GREETING = "Hi! How can I help you today?"

PERSONAS = [
    "You are polite and brief.",
    "You are in a hurry and a little impatient; you write short messages.",
    "You are friendly and chatty, but you stay on topic.",
    "You are careful and double-check what the agent says.",
]

USER_SYSTEM = """You are a customer talking to a customer-service agent (the other side of this chat).
Your goal: {intent}
Facts you know (give one only when the agent asks for it or needs it): {facts}
Persona: {persona}
Rules:
- Write one short message per turn, as the customer. Never pretend to be the agent; never call tools.
- Do not invent ids, names or details that are not in your facts; if asked for something you do not know, say so.
- When your goal is done (or the agent cannot do it), reply with exactly {stop}
- Do not end while the agent says it is about to do something: wait for it to confirm it is done."""


@dataclass
class UserTurn:
    text: str
    stop: bool
    usage: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower())


def _fmt(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _leaves(obj: Any, key: str = "", out: list[tuple[str, Any]] | None = None, depth: int = 0) -> list[tuple[str, Any]]:
    out = [] if out is None else out
    if isinstance(obj, dict) and depth < 4:
        for k, v in obj.items():
            _leaves(v, str(k), out, depth + 1)
    elif isinstance(obj, list) and depth < 4:
        for v in obj[:3]:
            _leaves(v, key, out, depth + 1)
    elif isinstance(obj, (str, int, float)) and not isinstance(obj, bool):
        out.append((key, obj))
    return out


_KEY_PREF = ("id", "name", "status", "total", "price", "amount", "balance", "email", "title", "count")


def read_goal_values(scenario: Scenario, limit: int = 3) -> list[str]:
    """Key values of the last gold call's output that the agent's answer should mention (read-only goal)."""
    if not scenario.gold_calls:
        return []
    known = _words(scenario.intent + " " + json.dumps(scenario.user_facts, default=str))
    leaves = [(k, v) for k, v in _leaves(scenario.gold_calls[-1].output)
              if not (isinstance(v, str) and (len(v) < 2 or len(v) > 80))]
    leaves.sort(key=lambda kv: next((i for i, p in enumerate(_KEY_PREF) if kv[0].lower().endswith(p)), len(_KEY_PREF)))
    out: list[str] = []
    for _, v in leaves:
        s = _fmt(v).strip()
        if s and s.lower() not in known and s not in out:
            out.append(s)
        if len(out) == limit:
            break
    return out


def _number_forms(s: str) -> list[str]:
    try:
        x = float(s)
    except ValueError:
        return [s]
    forms = {s, f"{x:.2f}", f"{x:g}"}
    if x == int(x):
        forms.add(str(int(x)))
    return sorted(forms)


def reply_has_values(text: str | None, values: list[str]) -> bool:
    """Does the agent's reply mention every value (case-insensitive; numbers in common forms)?"""
    if not text or not values:
        return False
    low = text.lower()
    return all(any(f.lower() in low for f in _number_forms(v)) for v in values)


def last_agent_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "assistant":
            return m.get("content") or ""
        if m.get("role") == "user":
            return ""
    return ""


def announces_action(text: str | None) -> bool:
    """The agent says it is about to act ("I'll cancel it now", "one moment")."""
    return bool(text) and bool(_ANNOUNCE_RE.search(text or ""))


def agent_says_done(messages: list[dict[str, Any]]) -> bool:
    """The agent has used a tool and its last reply is a statement: no question, no action announced."""
    text = last_agent_text(messages)
    if not text.strip() or "?" in text or announces_action(text):
        return False
    return any(m.get("role") == "tool" for m in messages)


class ScriptedUser:
    """Embedded default user, no LLM: deterministic, cheap, and fair about the facts it holds."""

    kind = "scripted"
    needs_goal_check = True

    def __init__(self, scenario: Scenario, patience: int = 8, goal_check: bool = True):
        self.scenario = scenario
        self.patience = patience
        self.goal_check = goal_check
        self.turns = 0
        intent = _words(scenario.intent)
        self.revealed = {k for k, v in scenario.user_facts.items() if _fmt(v).lower() in intent}

    async def first(self) -> UserTurn:
        self.turns = 1
        return UserTurn(self.scenario.intent, False)

    async def respond(self, messages: list[dict[str, Any]], goal_reached: bool = False) -> UserTurn:
        self.turns += 1
        if (goal_reached and self.goal_check) or (not self.goal_check and agent_says_done(messages)):
            return UserTurn(f"Thank you, that's all I needed. {STOP}", True)
        if self.turns > self.patience:
            return UserTurn(f"I have to go now. {STOP}", True)
        text = _words(last_agent_text(messages))
        asked = []
        for k, v in self.scenario.user_facts.items():
            aliases = {k.lower(), k.lower().replace("_", " "), k.lower().split("_")[-1]}
            if any(a and a in text for a in aliases):
                asked.append(k)
        if not asked and "?" in text:
            asked = [k for k in self.scenario.user_facts if k not in self.revealed] or list(self.scenario.user_facts)
        if asked:
            self.revealed.update(asked)
            parts = [f"my {k.replace('_', ' ')} is {_fmt(self.scenario.user_facts[k])}" for k in asked]
            return UserTurn(("Sure: " + "; ".join(parts) + ".").replace("Sure: my", "Sure, my"), False)
        return UserTurn("Yes, please go ahead with my request.", False)

    async def nudge(self, messages: list[dict[str, Any]]) -> UserTurn:
        return UserTurn(NUDGE, False)


class LLMUser:
    """A user played by an LLM prompted with the intent, the user facts and a persona (no tools).
    lane: the endpoint its turns go to when it shares the agent's client (its conversation's)."""

    kind = "llm"
    needs_goal_check = False

    def __init__(self, scenario: Scenario, client: LLMClient, trial: int = 0, temperature: float = 0.0,
                 max_tokens: int = 200, persona: str | None = None, lane: str | None = None):
        self.scenario, self.client, self.trial, self.lane = scenario, client, trial, lane
        self.temperature, self.max_tokens = temperature, max_tokens
        idx = int(content_hash({"persona": scenario.id, "trial": trial}, 8), 16) % len(PERSONAS)
        self.persona = persona or PERSONAS[idx]
        facts = json.dumps(scenario.user_facts, ensure_ascii=False, default=str) if scenario.user_facts else "(none)"
        self.system = USER_SYSTEM.format(intent=scenario.intent, facts=facts, persona=self.persona, stop=STOP)

    def view(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation as the user sees it: roles flipped, tool traffic hidden."""
        out = [{"role": "system", "content": self.system}, {"role": "user", "content": GREETING}]
        for m in messages:
            if m.get("role") == "user":
                out.append({"role": "assistant", "content": m.get("content") or ""})
            elif m.get("role") == "assistant" and (m.get("content") or "").strip():
                out.append({"role": "user", "content": m["content"]})
        return out

    async def _ask(self, view: list[dict[str, Any]], salt: str) -> UserTurn:
        reply = await self.client.chat(view, temperature=self.temperature, max_tokens=self.max_tokens,
                                       stage="rollout_user", cache_salt=[self.trial, salt], seed=self.trial,
                                       endpoint=self.lane)
        text = (reply.content or "").strip()
        return UserTurn(text, STOP in text, dict(reply.usage), reply.latency_s)

    async def first(self) -> UserTurn:
        return await self._ask(self.view([]), "first")

    async def respond(self, messages: list[dict[str, Any]], goal_reached: bool = False) -> UserTurn:
        return await self._ask(self.view(messages), "respond")

    async def nudge(self, messages: list[dict[str, Any]]) -> UserTurn:
        view = self.view(messages)
        view.append({"role": "system", "content": "The agent has said it will do something but has not confirmed it "
                                                  f"is done. Do not write {STOP} now: ask the agent to go ahead."})
        turn = await self._ask(view, "nudge")
        if turn.stop or not turn.text:
            return UserTurn(NUDGE, False, turn.usage, turn.latency_s)
        return turn
