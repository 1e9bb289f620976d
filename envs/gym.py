"""A Gymnasium wrapper over an Environment, for RL later.

Action: a JSON text {"name": ..., "arguments": {...}} (one tool call), or {"stop": true} to end the
episode. Observation: a JSON text (the reset observation, then each tool result). Reward: 1.0 at
the end of the episode when the state hash equals the gold hash, else 0.0.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import gymnasium
from gymnasium import spaces

from envs.episode import Environment

MAX_TEXT = 1 << 20
CHARSET = string.printable  # observations are ASCII JSON (ensure_ascii)


class ToolEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, domain_dir: Path | str | None = None, *, env: Environment | None = None,
                 gold_hash: str | None = None, scenario: Any = None, max_steps: int = 30, **open_kw: Any):
        super().__init__()
        self.env = env if env is not None else Environment.open(domain_dir, **open_kw)
        self._owns = env is None
        self.scenario = scenario
        self.gold_hash = gold_hash or (getattr(scenario, "gold_hash", None) if scenario is not None else None)
        if self.gold_hash is None and isinstance(scenario, dict):
            self.gold_hash = scenario.get("gold_hash")
        self.max_steps = max_steps
        self.action_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = options or {}
        if "scenario" in options:
            self.scenario = options["scenario"]
            self.gold_hash = options.get("gold_hash") or (
                self.scenario.get("gold_hash") if isinstance(self.scenario, dict)
                else getattr(self.scenario, "gold_hash", None))
        if "gold_hash" in options:
            self.gold_hash = options["gold_hash"]
        obs = self.env.reset(self.scenario)
        self.steps = 0
        return json.dumps(obs, default=str), {"gold_hash": self.gold_hash}

    def _end(self) -> tuple[float, dict[str, Any]]:
        h = self.env.state_hash()
        return (1.0 if self.gold_hash is not None and h == self.gold_hash else 0.0), {"state_hash": h}

    def step(self, action: str | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            call = json.loads(action) if isinstance(action, str) else action
        except ValueError as exc:
            call = {"_error": f"action is not valid JSON: {exc}"}
        if isinstance(call, dict) and call.get("stop"):
            reward, info = self._end()
            return json.dumps({"ok": True, "content": "episode ended", "error": None}), reward, True, False, info
        if isinstance(call, dict) and "_error" in call:
            obs = {"ok": False, "content": None, "error": call["_error"]}
        else:
            obs = self.env.step(call).model_dump()
        self.steps += 1
        truncated = self.steps >= self.max_steps
        reward, info = (self._end() if truncated else (0.0, {}))
        return json.dumps(obs, default=str), reward, False, truncated, info

    def close(self) -> None:
        if self._owns:
            self.env.close()
