"""Fixtures of the fault suite: a fault-injecting LLM endpoint and one clean pipeline run to compare with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault.faulty_llm import FaultyLLM


@pytest.fixture(scope="session")
def clean_pipeline(tmp_path_factory):
    """A full clean run of the pipeline child (its own oracle endpoint): (workspace, snapshot, stage seconds)."""
    from tests.fault.crash import clean_run
    from tests.fault.pipeline import snapshot

    base = tmp_path_factory.mktemp("clean")
    ws = base / "ws"
    with FaultyLLM(ws) as srv:
        stage_s = clean_run(ws, srv.url, base / "ws.stages")
    return ws, snapshot(ws), stage_s


@pytest.fixture()
def faulty_llm(tmp_path: Path):
    with FaultyLLM(tmp_path / "ws", hang_s=5) as srv:
        yield srv
