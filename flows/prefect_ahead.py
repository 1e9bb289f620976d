"""Prefect's temporary API server, started ahead of the imports of a command that runs flows.

With no PREFECT_API_URL, Prefect starts a temporary server (a uvicorn subprocess) at a flow's first
API call: after the command has imported the flows (~2 s) and Prefect's server module (~2 s), and
then waits ~5 s for it, every flow command (at 1k tools a third of `agentscaler run --until build`).
`start()` launches that same server first thing, so that its start runs on another core while this
process imports the flows, and this process never imports the server module; `ready()`, just before
the first flow, waits for it to answer. It is the server Prefect would start: the same uvicorn
command and environment (UI off, ephemeral), on a free local port; PREFECT_API_URL points this
process at it (and its children, which run no flows); it is stopped when the process exits. A server
that does not come up is stopped and Prefect starts its own, as without this.

Only for a fresh command process: where Prefect is already imported (its settings read), or a server
is configured, or Prefect's temporary server is turned off, `start()` does nothing.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from importlib.util import find_spec
from pathlib import Path
from typing import Any

_STATE: dict[str, Any] = {"proc": None, "url": None, "fallback": ExitStack()}


def _command(port: int) -> list[str]:
    """Prefect's own command line for its temporary server (SubprocessASGIServer)."""
    spec = find_spec("prefect")
    app_dir = Path(spec.origin).parent.parent if spec and spec.origin else Path(".")
    return [sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir), "--factory",
            "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "error", "--lifespan", "on"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(command: list[str] | None = None) -> bool:
    """Launch the temporary server now (True), or nothing where it would not be Prefect's choice.
    `command`: another command line (tests: one that fails, to see Prefect take over)."""
    if (_STATE["proc"] is not None or "prefect" in sys.modules or os.environ.get("PREFECT_API_URL")
            or os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED", "true").lower() in ("0", "false")):
        return False
    port = _free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    _STATE["proc"] = subprocess.Popen(command or _command(port), env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _STATE["url"] = os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    atexit.register(stop)
    return True


def ready(timeout: float | None = None) -> bool:
    """Wait until the server started by start() answers (True); False when none was started here,
    or it did not come up (then it is stopped and Prefect starts its own at the first flow)."""
    proc = _STATE["proc"]
    if proc is None or _STATE["url"] is None:
        return False
    limit = timeout if timeout is not None else float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
                                                                      "180"))
    deadline = time.monotonic() + limit
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{_STATE['url']}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    stop()
    from prefect.settings import PREFECT_API_URL, temporary_settings

    _STATE["url"] = None
    os.environ.pop("PREFECT_API_URL", None)
    _STATE["fallback"].enter_context(temporary_settings(restore_defaults={PREFECT_API_URL}))
    return False


def stop() -> None:
    """Stop the server started here (at exit; or when it did not come up)."""
    proc, _STATE["proc"] = _STATE["proc"], None
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
