"""Start benchmarks/scripted_llm.py (a *scripted* OpenAI-compatible endpoint, not a model) for tests
that are about our own plumbing: rollout engine, evaluation, orchestration."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from agentscaler.llm_server import free_port

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def scripted_endpoint(mode: str = "oracle", scenarios: list[Path] = (), scenarios_glob: str | None = None,
                      delay: float = 0.0, fail_first: int = 0) -> Iterator[str]:
    """Yield the base URL of a scripted endpoint; oracle mode replays the given scenarios' gold calls."""
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.scripted_llm", "--port", str(port), "--delay", str(delay),
           "--mode", mode, "--fail-first", str(fail_first)]
    if scenarios:
        cmd += ["--scenarios", *map(str, scenarios)]
    if scenarios_glob:
        cmd += ["--scenarios-glob", scenarios_glob]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(400):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/models", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
