"""Orphans (issue 22, class 11): SIGTERM or SIGINT (what a process manager, `docker stop`, a Prefect
cancellation or Ctrl-C sends) to a command that started the local llama.cpp server or sandbox
workers leaves no process of ours behind. Real processes throughout: the real CLI, the real
server with SmolLM2, real sandbox workers."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from envs.sandbox import SCRATCH_PREFIX, _sweep_orphan_scratch, bwrap_works
from tests.fault.orphans import descendants, wait_gone

ROOT = Path(__file__).resolve().parents[2]
needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")

SERVER_IN_A_SCRIPT = """
import sys, time
from agentscaler.llm_server import local_server
with local_server(log_path=sys.argv[1]) as url:
    print("ready", url, flush=True)
    time.sleep(600)
"""

ENVIRONMENT_IN_A_SCRIPT = """
import os, sys, time
sys.path.insert(0, sys.argv[2])
from build import build_shop
from envs.episode import Environment
from envs.sandbox import WorkerProcess
d = build_shop(sys.argv[1])
if sys.argv[3] == "bwrap":
    e = Environment.open(d)
    e.reset()
    e.call("get_user", {"user_id": "u1"})
else:
    os.environ["AGENTSCALER_UNSAFE_SANDBOX"] = "1"
    w = WorkerProcess(d, use_bwrap=False)
    w.start()
print("ready", flush=True)
time.sleep(600)
"""


def _default_sigint() -> None:
    # A runner started in the background (nohup, `cmd &` in a script) ignores SIGINT, and a child
    # inherits that: the SIGINT case would then test a kill after 30 s, not Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(cmd: list[str], ready: str, timeout_s: float = 180.0) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            preexec_fn=_default_sigint)
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"{cmd[:4]} ended before it was ready (exit {proc.wait()})")
        if ready in line:
            return proc
    proc.kill()
    raise AssertionError(f"{cmd[:4]} not ready within {timeout_s} s")


def _signal_and_check(proc: subprocess.Popen, sig: int, what: str) -> None:
    kids = descendants(proc.pid)
    assert kids, f"{what}: no child process to check"
    proc.send_signal(sig)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        assert sig == signal.SIGKILL, f"{what}: still running 30 s after signal {sig} (killed now)"
    left = wait_gone(kids)
    assert not left, f"{what}: {len(left)} of {len(kids)} child processes outlived signal {sig} (killed now)"


@pytest.mark.llm
@needs_llama
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_llm_serve_leaves_no_server_behind(tmp_path, sig):
    """`agentscaler llm serve`: its llama.cpp server runs in its own session (a terminal's Ctrl-C
    does not reach it), so before the fix a SIGTERM ended the command and left the server holding
    memory and a port. Stopped by: the server's parent-death signal."""
    cli = Path(sys.executable).parent / "agentscaler"
    proc = _start([str(cli), "llm", "serve", "--log", str(tmp_path / "server.log")], '"base_url"')
    _signal_and_check(proc, sig, "agentscaler llm serve")


@pytest.mark.llm
@needs_llama
def test_a_process_inside_local_server_leaves_no_server_behind(tmp_path):
    proc = _start([sys.executable, "-c", SERVER_IN_A_SCRIPT, str(tmp_path / "server.log")], "ready")
    _signal_and_check(proc, signal.SIGTERM, "local_server()")


@pytest.mark.parametrize("mode", ["bwrap", "no-bwrap"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_process_holding_an_environment_leaves_no_worker_behind(tmp_path, mode, sig):
    """A Python process with an open Environment (zygote, active child, spare child): SIGTERM or even
    SIGKILL leaves no worker. Stopped by: bwrap --die-with-parent, the worker's and each child's
    parent-death signal."""
    if mode == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap cannot create namespaces here")
    shop = str(ROOT / "tests" / "data" / "domains" / "shop")
    proc = _start([sys.executable, "-c", ENVIRONMENT_IN_A_SCRIPT, str(tmp_path / "shop"), shop, mode], "ready", 60)
    tmp = Path(tempfile.gettempdir())
    assert list(tmp.glob(f"{SCRATCH_PREFIX}{proc.pid}-*")), "the worker's scratch folder does not name its owner"
    _signal_and_check(proc, sig, f"Environment ({mode})")
    # A dead owner's scratch folder (left by SIGKILL) goes at the next process's first worker;
    # a live owner's folder stays.
    live = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    try:
        _sweep_orphan_scratch.__wrapped__()
        assert not list(tmp.glob(f"{SCRATCH_PREFIX}{proc.pid}-*")), "a dead owner's scratch folder stayed"
        assert live.is_dir(), "a live owner's scratch folder was removed"
    finally:
        shutil.rmtree(live, ignore_errors=True)
