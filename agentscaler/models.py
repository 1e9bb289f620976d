"""Data models shared by every stage: tool, domain record, scenario, trajectory.

These are the boundaries between stages (files on disk), so they are pydantic models with
extra="forbid": a typo in a field name is an error, not silently dropped data.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentscaler.hashing import content_hash

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Tool(Strict):
    """One API, normalized from any corpus. `id` is the hash of the normalized spec."""

    id: str = ""
    name: str  # function-safe, ^[a-zA-Z0-9_-]{1,64}$, unique within a corpus
    source_name: str  # the name as the corpus spelled it
    source: str  # toolbench | xlam | bfcl | openai | mcp | tau2 | nestful...
    description: str
    parameters: dict[str, Any]  # a JSON Schema object: {"type": "object", "properties": {...}, "required": [...]}
    returns: dict[str, Any] | None = None  # JSON Schema of the output, when known
    category: str | None = None
    kind: Literal["read", "write"] | None = None  # known for some corpora (tau2); inferred in synthesis otherwise

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"tool name {v!r} is not function-safe (^[a-zA-Z0-9_-]{{1,64}}$)")
        return v

    def spec_hash(self) -> str:
        """Hash of what defines the tool's behaviour (not where it came from)."""
        return content_hash({"name": self.name, "description": self.description.strip(),
                             "parameters": self.parameters, "returns": self.returns})

    def with_id(self) -> "Tool":
        return self.model_copy(update={"id": self.spec_hash()})

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI tool-calling form the agent sees."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


class Call(Strict):
    """One tool call: name and JSON arguments (a dict, never a string)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class GoldCall(Call):
    output: Any = None  # what the tool returned during gold execution
    kind: Literal["read", "write"] = "read"


class Scenario(Strict):
    """One agentic task: what the user wants, the gold calls, and the gold final state."""

    id: str
    domain: str
    read_only: bool
    intent: str  # the user's goal in natural language
    user_facts: dict[str, Any] = Field(default_factory=dict)  # what the user knows (ids, names) and may tell
    gold_calls: list[GoldCall]
    gold_hash: str  # canonical state hash after the gold calls
    seed_hash: str  # canonical state hash of the seed database
    gold_diff: list[dict[str, Any]] = Field(default_factory=list)  # field-level diff seed -> gold
    split: Literal["train", "heldout"] = "train"
    seed: int = 0

    def public(self) -> dict[str, Any]:
        """The `agentscaler show scenarios --json` shape."""
        return {"id": self.id, "domain": self.domain, "read_only": self.read_only,
                "gold_calls": [{"name": c.name, "arguments": c.arguments} for c in self.gold_calls],
                "gold_hash": self.gold_hash, "intent": self.intent}


class Verdict(Strict):
    passed: bool
    reasons: list[str] = Field(default_factory=list)  # reason codes, empty when passed
    attribution: Literal["none", "agent", "user", "environment"] = "none"
    diff: list[dict[str, Any]] = Field(default_factory=list)  # final vs gold field diff when states differ


GOLD_REPLAY = "gold-replay"  # agent_model of demonstrations replayed from gold calls (tasks.rollouts.gold)
ORIGINS = ("agent", GOLD_REPLAY)


class Trajectory(Strict):
    """One recorded user-agent-tool conversation on a scenario (OpenAI chat message format).

    `agent_model` names the model that produced it, or GOLD_REPLAY for a demonstration replayed
    from the scenario's gold calls: `origin` keeps the two apart in every count and row."""

    id: str
    run_id: str
    scenario_id: str
    domain: str
    trial: int = 0
    messages: list[dict[str, Any]]  # system/user/assistant(tool_calls)/tool, OpenAI shape
    tools: list[dict[str, Any]] = Field(default_factory=list)  # OpenAI tool schemas the agent saw
    final_hash: str = ""
    final_diff: list[dict[str, Any]] = Field(default_factory=list)  # seed -> final
    end_reason: str = ""  # user_stop | turn_limit | fatal_error
    error: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    tokens: dict[str, int] = Field(default_factory=dict)
    agent_model: str = ""
    user_kind: str = ""
    verdict: Verdict | None = None

    @property
    def origin(self) -> str:
        """"gold-replay" for a demonstration replayed from the scenario's gold calls, else "agent"
        (a model's own experience): the label every count, row and report keeps apart."""
        return GOLD_REPLAY if self.agent_model == GOLD_REPLAY else "agent"
