"""The scenarios stage's one config: everything that decides which scenarios a domain gets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentscaler.hashing import content_hash


class ScenarioParams(BaseModel):
    """Everything that decides which scenarios a domain gets (their hash names the output)."""

    model_config = ConfigDict(extra="forbid")

    per_domain: int = Field(20, ge=0)
    max_length: int = Field(4, ge=1, le=32)
    seed: int = 0
    read_share: float = Field(0.4, ge=0.0, le=1.0)  # target share of read-only scenarios
    # the mix: this share of one-call scenarios; the others walk data-flow edges (chained reads for
    # read-only scenarios, create-then-change for write scenarios) with lengths 2..max_length
    single_share: float = Field(0.3, ge=0.0, le=1.0)
    length_weights: list[float] | None = None  # weights of multi-call target lengths 2..max_length (default uniform)
    optional_prob: float = Field(0.3, ge=0.0, le=1.0)  # chance to fill an optional parameter
    attempts_factor: int = Field(10, ge=1)  # at most per_domain * attempts_factor walks
    arg_retries: int = Field(3, ge=1)  # fresh arguments for a failing call before the walk is dropped
    verify_replay: bool = True
    intents: str = "template"  # who wrote the intents: template | llm:<model> (set by build_scenarios)
    heldout_fraction: float = Field(0.2, ge=0.0, le=1.0)
    tau2_heldout: bool = True

    def key(self) -> str:
        return content_hash(self.model_dump())
