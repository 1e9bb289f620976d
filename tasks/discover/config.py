"""The discover stage's one config (DiscoverConfig), with thresholds per embedding."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

# Cosine scales differ per embedding; tuned on tests/data/labelled_tools.json (see README / report).
EMBED_DEFAULTS: dict[str, dict[str, float]] = {
    "minilm": {"threshold": 0.45, "flow_min_sim": 0.30, "attach_min_sim": 0.30, "group_min_sim": 0.30, "drop_min_sim": 0.15},
    "fast": {"threshold": 0.60, "flow_min_sim": 0.50, "attach_min_sim": 0.40, "group_min_sim": 0.40, "drop_min_sim": 0.30},
}


class DiscoverConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    embedding: Literal["minilm", "fast"] = "fast"
    threshold: float | None = None  # similar-edge cosine; None = the embedding's default
    top_k: int = 15  # similar edges kept per tool
    method: Literal["louvain", "leiden"] = "louvain"
    resolution: float = 1.0
    max_size: int = 40  # bigger communities are split recursively
    min_size: int = 3  # smaller ones are attached to the nearest domain or grouped
    param_weight: float = 0.5  # share of the parameter vectors in a tool vector (rest: description)
    flow_min_sim: float | None = None
    flow_bonus: float = 0.5  # weight a dataflow edge adds to its pair for community detection
    attach_min_sim: float | None = None
    group_min_sim: float | None = None  # leftovers group with each other only above this cosine
    drop_min_sim: float | None = None
    seed: int = 0

    def resolved(self) -> "DiscoverConfig":
        d = EMBED_DEFAULTS[self.embedding]
        return self.model_copy(update={k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in d.items()})
