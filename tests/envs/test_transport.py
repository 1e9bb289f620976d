"""The parent's side of the sandbox pipes against a scripted hostile worker (issue 22, class 3).

The worker here is a small script that speaks envs.worker's protocol (the zygote's start-up report
and `next`, then a child's frames) and then misbehaves: a fake, because these tests are about our
own transport code in envs.sandbox, not about the sandbox. Real tool code cannot even reach these
paths any more (its frames lack the request's nonce: tests/envs/test_hardening.py), so the
deadlines and caps below are the layer behind that one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from envs.sandbox import RequestTooLarge, WorkerCrashed, WorkerProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
from build import build_shop  # noqa: E402

PEER = r'''
import json, os, socket, struct, sys, threading, time
H = struct.Struct(">II16s")
ctl = socket.socket(fileno=int(sys.argv[1]))
mode, cap = sys.argv[2], int(sys.argv[3])
layers = {"rlimits": True, "landlock": True, "seccomp": True, "socket_blocked": True, "fs_hidden": True,
          "fork_blocked": True, "uid": 65534, "secrets_hidden": True}

def frame(obj, nonce, payload_len=0):
    body = json.dumps(obj).encode()
    return H.pack(len(body), payload_len, nonce) + body

def exact(fd, n):
    out = b""
    while len(out) < n:
        b = os.read(fd, n - len(out))
        if not b:
            return None
        out += b
    return out

def child(req_r, rep_w):
    while True:
        hdr = exact(req_r, H.size)
        if hdr is None:
            return
        n, m, nonce = H.unpack(hdr)
        req = json.loads(exact(req_r, n))
        if m:
            exact(req_r, m)
        op = req["op"]
        if op == "info":
            os.write(rep_w, frame({"ok": True, "load_error": None, "missing": []}, nonce))
            if mode == "stop_reading":
                time.sleep(3600)
        elif mode == "trickle" and op == "snapshot":  # a reply announced at 200 MB, 64 KB a millisecond: never an empty pipe for long
            os.write(rep_w, frame({"ok": True}, nonce, 200 << 20))
            chunk = bytes(65536)
            while True:
                os.write(rep_w, chunk)
                time.sleep(0.001)
        elif mode == "over_cap":
            os.write(rep_w, frame({"ok": True}, nonce, cap + 1))
            time.sleep(3600)
        elif mode == "big_body":
            os.write(rep_w, H.pack(cap, 0, nonce))
            time.sleep(3600)
        elif mode == "wrong_nonce":
            os.write(rep_w, frame({"ok": True}, os.urandom(16)))
        elif mode == "big_snapshot" and op == "snapshot":
            data = bytes(range(256)) * (48 << 12)
            os.write(rep_w, frame({"ok": True}, nonce, len(data)) + data)
        else:
            os.write(rep_w, frame({"ok": True}, nonce))

ctl.sendall(frame({"ok": True, "layers": layers}, bytes(16)))
buf = b""
while True:
    while len(buf) < H.size or len(buf) < H.size + H.unpack_from(buf)[0]:
        b = ctl.recv(65536)
        if not b:
            sys.exit(0)
        buf += b
    n, _, nonce = H.unpack_from(buf)
    buf = buf[H.size + n:]
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    threading.Thread(target=child, args=(req_r, rep_w), daemon=True).start()
    socket.send_fds(ctl, [frame({"ok": True}, nonce)], [req_w, rep_r])
    os.close(req_w)
    os.close(rep_r)
'''


class ScriptedWorker(WorkerProcess):
    """WorkerProcess whose worker is the PEER script in `mode` (no sandbox: nothing untrusted runs)."""

    def __init__(self, domain_dir: Path, mode: str, **kw):
        super().__init__(domain_dir, use_bwrap=False, unsafe=True, **kw)
        self.mode = mode

    def _command(self, ctl: int, scratch: str) -> list[str]:
        cap = self.max_state if self.mode != "big_body" else self.max_reply + 8192
        return [sys.executable, "-c", PEER, str(ctl), self.mode, str(cap)]


@pytest.fixture()
def domain(tmp_path) -> Path:
    return build_shop(tmp_path / "shop")


def _worker(domain: Path, mode: str, **kw) -> ScriptedWorker:
    w = ScriptedWorker(domain, mode, time_limit=0.5, memory_mb=256, **kw)
    w.start()
    return w


@pytest.mark.timeout(60)
def test_the_deadline_holds_while_data_keeps_coming(domain):
    """A reply that never ends but never pauses for long: the read stops at the deadline."""
    w = _worker(domain, "trickle")
    try:
        t = time.monotonic()
        with pytest.raises(WorkerCrashed, match="time limit"):
            w.request({"op": "snapshot"}, timeout=1.0)
        assert time.monotonic() - t < 4
        assert w.restarts == 1 and w.request({"op": "ping"})[0]["ok"]  # a fresh child took over
    finally:
        w.close()


@pytest.mark.parametrize("mode", ["over_cap", "big_body"])
@pytest.mark.timeout(60)
def test_a_reply_over_its_cap_is_refused_at_the_header(domain, mode):
    """A snapshot announced one byte over the memory budget, or a JSON body over the reply cap, is
    refused as soon as its header is read (nothing is allocated or waited for)."""
    w = _worker(domain, mode)
    try:
        t = time.monotonic()
        with pytest.raises(WorkerCrashed, match="too large"):
            w.request({"op": "snapshot"}, timeout=30.0)
        assert time.monotonic() - t < 3
    finally:
        w.close()


@pytest.mark.timeout(60)
def test_a_worker_that_stops_reading_cannot_freeze_a_large_request(domain):
    """An 8 MB restore to a worker that no longer reads its pipe: the write is non-blocking and
    bounded by the deadline (it used to block for ever)."""
    w = _worker(domain, "stop_reading")
    try:
        t = time.monotonic()
        with pytest.raises(WorkerCrashed, match="did not take its request"):
            w.request({"op": "reset"}, b"x" * (8 << 20), timeout=1.0)
        assert time.monotonic() - t < 4
    finally:
        w.close()


def test_requests_over_their_cap_are_not_sent(domain):
    w = _worker(domain, "well_behaved")
    try:
        with pytest.raises(RequestTooLarge):
            w.request({"op": "call", "name": "x", "args": {"a": "x" * (w.max_reply + 70000)}, "kind": "read"})
        with pytest.raises(RequestTooLarge):
            w.request({"op": "reset"}, b"x" * (w.max_state + 1))
        assert w.restarts == 0 and w.request({"op": "ping"})[0]["ok"]
    finally:
        w.close()


def test_a_reply_to_another_request_is_refused(domain):
    w = _worker(domain, "wrong_nonce")
    try:
        with pytest.raises(WorkerCrashed, match="protocol"):
            w.request({"op": "ping"})
    finally:
        w.close()


@pytest.mark.timeout(60)
def test_a_large_reply_is_read_in_linear_time(domain):
    w = _worker(domain, "big_snapshot")
    try:
        t = time.monotonic()
        _, data = w.request({"op": "snapshot"}, timeout=10.0)
        took = time.monotonic() - t
        assert data == bytes(range(256)) * (48 << 12)
        assert took < 3, f"48 MB took {took:.2f} s"
    finally:
        w.close()
