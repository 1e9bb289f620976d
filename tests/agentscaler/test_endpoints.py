"""One rule for model endpoints (issue 16): `--llm`, else AGENTSCALER_LLM_URL, else the local server.
Pure logic: no server is started when a URL is in force, which is what these check."""

from __future__ import annotations

import pytest

from agentscaler.endpoints import LOCAL, is_local, resolve, serve

VLLM = "http://vllm:8000/v1"


def test_without_llm_or_env_the_local_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSCALER_LLM_URL", raising=False)
    assert resolve() == resolve(None) == LOCAL and is_local()


def test_the_environment_then_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCALER_LLM_URL", VLLM)  # as the compose file sets it on the workers
    assert resolve() == VLLM and not is_local()
    assert resolve("http://other:8000/v1") == "http://other:8000/v1"  # --llm wins
    assert resolve(LOCAL) == LOCAL and is_local(LOCAL)  # asked for explicitly
    with serve() as urls:  # a URL in force: nothing is started, the URL is used as given
        assert urls == [VLLM]
    with serve(f"{VLLM}, http://vllm-2:8000/v1") as urls:
        assert urls == [VLLM, "http://vllm-2:8000/v1"]
