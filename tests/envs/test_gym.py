"""The Gymnasium wrapper over the shop fixture (real sandboxed worker)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium
import pytest

from envs.sandbox import bwrap_works
from envs.episode import Environment
from envs.gym import ToolEnv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
# These tests are about the API, not isolation (tests/envs/test_sandbox_attacks.py is): where
# bubblewrap is unusable they run the worker with the layers the machine has.
UNSAFE = not bwrap_works()
from build import build_shop  # noqa: E402

GOLD = [{"name": "place_order", "arguments": {"user_id": "u1", "product_id": "p4", "quantity": 2}}]


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    return build_shop(tmp_path_factory.mktemp("ws") / "shop")


@pytest.fixture(scope="module")
def gold_hash(shop) -> str:
    with Environment.open(shop, unsafe=UNSAFE) as e:
        e.reset()
        assert all(r.ok for r in e.call_batch(GOLD))
        return e.state_hash()


def test_reward_one_when_gold_state_reached(shop, gold_hash):
    env = ToolEnv(shop, unsafe=UNSAFE, gold_hash=gold_hash)
    try:
        assert isinstance(env, gymnasium.Env)
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs) and json.loads(obs)["domain"] == "shop"
        action = json.dumps(GOLD[0])
        assert env.action_space.contains(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        assert json.loads(obs)["ok"] and reward == 0.0 and not terminated and not truncated
        obs, reward, terminated, truncated, info = env.step('{"stop": true}')
        assert terminated and reward == 1.0 and info["state_hash"] == gold_hash

        env.reset()
        obs, *_ = env.step('{"name": "get_user", "arguments": {"user_id": 3}}')
        assert "invalid arguments" in json.loads(obs)["error"]
        obs, *_ = env.step("not json")
        assert "not valid JSON" in json.loads(obs)["error"]
        _, reward, terminated, _, _ = env.step({"stop": True})
        assert terminated and reward == 0.0
    finally:
        env.close()


def test_truncates_at_max_steps(shop, gold_hash):
    env = ToolEnv(shop, unsafe=UNSAFE, gold_hash=gold_hash, max_steps=2)
    try:
        env.reset(options={"scenario": {"id": "s1", "intent": "buy notebooks", "gold_hash": gold_hash}})
        env.step(json.dumps(GOLD[0]))
        _, reward, terminated, truncated, _ = env.step('{"name": "get_order", "arguments": {"order_id": "o4"}}')
        assert truncated and not terminated and reward == 1.0
    finally:
        env.close()
