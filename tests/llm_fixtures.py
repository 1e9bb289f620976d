"""Session fixture `local_llm`: the base URL of a real local SmolLM2 server (llama-cpp-python).

Import it in tests/conftest.py (`from tests.llm_fixtures import local_llm`). Skips, not fails,
only when llama_cpp is not installed; a server that does not start is a failure.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory) -> Iterator[str]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'agentscaler[llm]')")
    from agentscaler.llm_server import local_server

    log = tmp_path_factory.mktemp("llm") / "server.log"
    with local_server(log_path=log, startup_timeout=180) as url:
        yield url
