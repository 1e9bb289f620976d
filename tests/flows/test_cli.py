"""flows/cli.py: a stage command against a remote endpoint takes the vllm-endpoint slot per request
when a Prefect server is configured, as the flows do (issue 16). Run in a fresh process, since
importing the flows anywhere in this one installs the slot for good."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import os, sys
from pathlib import Path
from agentscaler.llm import REQUEST_SLOT
from agentscaler.workspace import Workspace
from flows.cli import _endpoint
ws, remote = Workspace(Path(sys.argv[1])), sys.argv[2]
for api_url in (None, "http://127.0.0.1:9/api"):  # never contacted: only whether a server is configured
    if api_url:
        os.environ["PREFECT_API_URL"] = api_url
    with _endpoint(remote, ws) as urls:
        print(getattr(REQUEST_SLOT["factory"], "__qualname__", None), urls)
"""


def test_remote_endpoint_holds_the_slot_only_with_a_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    res = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "ws"), "http://127.0.0.1:9/v1"], env=env,
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == ["None ['http://127.0.0.1:9/v1']",  # no server: no slot
                                       "endpoint_slot ['http://127.0.0.1:9/v1']"]
