"""DomainSpec: everything needed to run a domain's environment, saved as domains/<id>/spec.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ColumnType = Literal["integer", "real", "text", "boolean", "json"]
Policy = Literal["exact", "text", "numeric", "ignore"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ColumnSpec(Strict):
    name: str
    type: ColumnType = "text"
    nullable: bool = True
    foreign_key: str | None = None  # "table.column"
    # How the state hash and diff compare this column: exact; text (case/space-normalized);
    # numeric (within tolerance); ignore (volatile timestamps, generated ids).
    policy: Policy = "exact"
    tolerance: float = 1e-6


class TableSpec(Strict):
    name: str
    columns: list[ColumnSpec]
    primary_key: list[str]

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name} has no column {name}")


class ToolSpec(Strict):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema object
    returns: dict[str, Any] | None = None
    kind: Literal["read", "write"]
    source_tool_id: str | None = None  # the corpus Tool id this came from
    # "synthesized": not from the corpus; a read synthesis added so a write's effect can be seen
    # (tasks.environments.rules.observer_plans); reported apart wherever reads are counted
    origin: Literal["corpus", "synthesized"] = "corpus"

    def openai_schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


class Edge(Strict):
    """A directed dependency: an output of src can feed an input of dst (used by scenario walks)."""

    src: str
    dst: str
    kind: Literal["similar", "dataflow"] = "dataflow"
    weight: float = 1.0


class DomainSpec(Strict):
    id: str
    name: str
    description: str = ""
    tools: list[ToolSpec]
    tables: list[TableSpec]
    edges: list[Edge] = Field(default_factory=list)
    models_path: str = "models.py"
    code_path: str = "tools.py"
    seed_path: str = "seed.sqlite"
    synthesizer: str = "rules"  # rules | llm | tau2
    seed: int = 0
    clock: str = "2024-05-15T15:00:00"  # the fixed "now" of every episode (deterministic replays)
    report: dict[str, Any] = Field(default_factory=dict)  # synthesis report (repair rounds, executes...)

    def tool(self, name: str) -> ToolSpec:
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(name)

    def table(self, name: str) -> TableSpec:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    @classmethod
    def load(cls, domain_dir: Path) -> "DomainSpec":
        return cls.model_validate(json.loads((Path(domain_dir) / "spec.json").read_text("utf-8")))
