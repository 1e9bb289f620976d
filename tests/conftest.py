"""Shared fixtures: environment for offline runs, one Prefect test harness per session, the shop domain."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from agentscaler.settings import configure_prefect_env
from agentscaler.workspace import Workspace

configure_prefect_env()  # offline: analytics off, no hub downloads; before anything imports Prefect

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def prefect_harness():
    """A real Prefect (ephemeral, temporary database) for the whole session; started on first use."""
    from prefect.testing.utilities import prefect_test_harness

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    with prefect_test_harness(server_startup_timeout=120):
        yield
        # Drained here with a bound: the harness drains without one, and a worker holding events for
        # a server some test has stopped (tests/deployments) retries it for ever. A drained worker
        # leaves Prefect's cache, so the harness's own drain then returns at once.
        for service in (EventsWorker, APILogWorker):
            service.drain_all(timeout=60)


@pytest.fixture()
def shop_domain(tmp_path: Path) -> Path:
    """A fresh copy of the hand-written shop fixture domain."""
    return load_shop_builder()(tmp_path / "domains" / "shop")


def copy_workspace(built: Path, tmp_path: Path) -> Workspace:
    """A fresh copy of a workspace a module fixture built once (its domains, scenarios and catalog),
    for a test that writes into it: copying takes milliseconds, rebuilding takes the sandbox seconds."""
    shutil.copytree(built, tmp_path / "ws")
    return Workspace(tmp_path / "ws")


def load_shop_builder():
    """The fixture's build_shop function, imported from tests/data/domains/shop/build.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("shop_fixture_build", DATA / "domains" / "shop" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build_shop


from tests.llm_fixtures import local_llm  # noqa: E402,F401  (session fixture: the real local SmolLM2 server)
from tests.sft_fixtures import exported, tokenizer  # noqa: E402,F401  (session fixtures: the SFT export of hand-written trajectories)
