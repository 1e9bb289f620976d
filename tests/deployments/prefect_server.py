"""A real `prefect server start` (temporary PREFECT_HOME, free loopback port) and process workers,
started and stopped by the tests that use them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from agentscaler.llm_server import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def server_env(home: Path, url: str | None = None) -> dict[str, str]:
    """The environment of everything that talks to the test server (CLI, workers, the server)."""
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
           # fast loops: the scheduler and workers poll every 2 s instead of 60 s / 10 s
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2", "PREFECT_WORKER_QUERY_SECONDS": "2",
           "PREFECT_WORKER_PREFETCH_SECONDS": "5", "PREFECT_LOGGING_LEVEL": "INFO",
           "AGENTSCALER_ZOMBIE_AFTER_S": "50"}  # deploy: a flow run silent for 50 s (beats: 30 s) = crashed
    env.pop("PREFECT_API_URL", None)
    if url:
        env["PREFECT_API_URL"] = url
    return env


@contextlib.contextmanager
def prefect_server(home: Path, startup_s: float = 180) -> Iterator[str]:
    """Yield the API URL of a fresh server; its log is home/server.log."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(home / "server.log", "w")
    url = f"http://127.0.0.1:{port}/api"
    # the UI's pages ask this URL for their data (its default is port 4200)
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env={**server_env(home), "PREFECT_UI_API_URL": url}, stdout=log, stderr=subprocess.STDOUT, cwd=home,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server exited {proc.returncode}: {(home / 'server.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"prefect server not up after {startup_s}s")
        yield url
    finally:
        stop(proc)
        log.close()


def start_worker(home: Path, url: str, pool: str, name: str, cwd: Path, limit: int | None = None,
                 queue: str | None = None) -> subprocess.Popen:
    """A process worker in its own session (so a test can kill it with its flow runs); `limit`
    caps the flow runs it runs at once, `queue` keeps it to one work queue of the pool."""
    log = open(home / f"worker-{name}.log", "w")
    extra = (["--limit", str(limit)] if limit else []) + (["--work-queue", queue] if queue else [])
    return subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", pool, "--name", name, "--type", "process",
                             *extra],
                            # a poll a second (Prefect's default is 10 s): a batch that ends within a poll gap
                            # would let one worker take every batch of a test that expects them spread
                            env=server_env(home, url) | {"PREFECT_WORKER_QUERY_SECONDS": "1"}, stdout=log,
                            stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)


def stop(*procs: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 20.0) -> None:
    """Stop processes started here, each with its whole session (flow-run children included): all
    signalled first, then waited for within one grace period, then the rest killed, so stopping
    several costs the slowest, not the sum (three workers that ignored SIGTERM in the full suite
    took 40 s when each had a grace of its own)."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
    deadline = time.monotonic() + grace_s
    for proc in live:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def cli(home: Path, url: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed `agentscaler` command against the test server."""
    return subprocess.run([str(BIN / "agentscaler"), *args], env=server_env(home, url), capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
