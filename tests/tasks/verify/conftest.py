"""The verifier tests' workspace: the shop fixture with 12 real scenarios (gold-executed in the sandbox)."""

from __future__ import annotations

import pytest

from agentscaler.workspace import Workspace
from tasks.scenarios.build import build_scenarios
from tests.conftest import load_shop_builder


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """One per test module (each writes its own runs into it)."""
    ws = Workspace(tmp_path_factory.mktemp("verify"))
    load_shop_builder()(ws.domain_dir("shop"))
    build_scenarios(ws, "shop", per_domain=12, seed=1)
    return ws
