"""The validation suite (tasks.environments.validate) on broken copies of the shop fixture, in the
real sandbox: each round of tries runs in one round trip, every call from the seed
(Environment.replay), and every defect is still reported with its reason."""

from __future__ import annotations

from pathlib import Path

from envs.sandbox import WorkerProcess
from tasks.environments.validate import validate_environment
from tests.data.domains.shop.build import build_shop
from tests.envs.test_episode import UNSAFE

BROKEN = """

def get_user(db, user_id: str) -> dict:
    raise ToolError("the user service is down")


def find_products(db, query: str, max_price: float | None = None) -> list:
    return []


def cancel_order(db, order_id: str) -> dict:  # the first write validated
    while True:
        pass
"""


def test_failing_tools_are_caught_and_the_rest_validated(tmp_path: Path, monkeypatch) -> None:
    d = build_shop(tmp_path / "shop")
    ops: list[str] = []
    send = WorkerProcess._send_request
    monkeypatch.setattr(WorkerProcess, "_send_request", lambda self, obj, *a, **k: (ops.append(obj.get("op")),
                                                                                    send(self, obj, *a, **k))[1])
    good = validate_environment(d, unsafe=UNSAFE, quality=False)
    # a round trip per round of tries (as many as the most tries any tool needed), not one per call
    calls = [r["calls"] for r in good["tools"].values()]
    assert ops.count("episodes") == max(calls) < sum(calls), (ops, calls)
    assert good["tools"]["get_user"]["reason"] is None and good["tools"]["update_email"]["changes_state"]
    (d / "tools.py").write_text((d / "tools.py").read_text() + BROKEN)
    v = validate_environment(d, unsafe=UNSAFE, quality=False, tries=2)
    tools = v["tools"]
    assert tools["get_user"]["reason"] == "tool_error" and "service is down" in tools["get_user"]["errors"][0]
    assert tools["find_products"]["reason"] == "empty_result" and tools["find_products"]["runs"]
    assert tools["cancel_order"]["reason"] == "tool_error" and not tools["cancel_order"]["changes_state"]
    assert tools["cancel_order"]["calls"] == 2  # every try made, each answered with an error (the time limit)
    # the writes after the hanging one still ran, from the seed (place_order changed it)
    assert tools["place_order"]["reason"] is None and tools["place_order"]["changes_state"], tools["place_order"]
    assert tools["update_email"]["executes"]
    assert tools["get_order"]["runs"] and tools["list_user_orders"]["runs"]
