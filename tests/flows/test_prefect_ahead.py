"""Prefect's temporary server started ahead (flows.prefect_ahead), in fresh Python processes as a
command runs it: a real uvicorn server and real Prefect flow runs against it; and a server that does
not come up (a command line that exits at once) leaves the flow to the server Prefect starts itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from flows import prefect_ahead
    started = prefect_ahead.start({command})
    proc = prefect_ahead._STATE["proc"]
    url = os.environ.get("PREFECT_API_URL")
    from prefect import flow
    from prefect.settings import get_current_settings
    ok = prefect_ahead.ready(timeout=120)

    @flow
    def add(a: int, b: int) -> list:
        return [a + b, get_current_settings().api.url]

    total, api = add(2, 3)
    print(json.dumps({{"started": started, "ready": ok, "url": url, "api": api, "total": total,
                       "pid": proc.pid if proc else None}}))
""")


def _run(command: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(command=command)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _gone(pid: int) -> bool:
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_the_flow_runs_on_the_server_started_ahead_which_stops_with_the_process() -> None:
    got = _run("")
    assert got["started"] and got["ready"] and got["total"] == 5
    assert got["url"].startswith("http://127.0.0.1:") and got["api"] == got["url"]
    assert _gone(got["pid"]), "the server started ahead outlived its process"


def test_a_server_that_does_not_come_up_leaves_the_flow_to_prefects_own() -> None:
    got = _run("[sys.executable, '-c', 'raise SystemExit(3)']")
    assert got["started"] and not got["ready"] and got["total"] == 5
    assert got["api"] is None  # Prefect's own temporary server: no URL configured
