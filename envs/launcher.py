"""The shared sandbox launcher: one bubblewrap for the many domains a build process validates, one
after another, so that each domain's worker is a fork, not a new sandbox and a new interpreter.

A domain's own sandbox start (envs.sandbox.WorkerProcess) costs ~50 ms of CPU, most of it before
any of the domain's code is read: bubblewrap's namespaces, the interpreter, `import envs.worker` and
pyseccomp. Here that is paid once per launcher: it starts inside one bubblewrap (the same user,
network, pid, ipc namespaces, read-only root and clean environment as a domain's own; the folders
that hold domains bound read-only under /domains) with its imports done, and on `open` forks a
zygote that runs envs.worker.main for that domain: the zygote reads the domain's files, sets its
rlimits, then Landlock (reads: the interpreter, the worker library and the domain's spec, code and
seed only; writes: a scratch folder of its own; signals scoped to itself) and its seccomp filter,
all before any of the domain's code runs, exactly as in a domain's own sandbox.

Used only where the kernel has Landlock ABI 6+ (envs.sandbox.Launcher.available): Landlock is what
keeps one domain's processes from the other domains' files, scratch folders and processes that the
shared mount and pid namespaces show. Elsewhere every domain keeps a sandbox of its own.

Protocol (a SOCK_SEQPACKET socket, `--ctl`): the parent sends {"op": "open", "argv": [...]} with
the new zygote's control socket attached (SCM_RIGHTS); the launcher answers {"ok": true, "pid": n}
with a pidfd of the zygote attached, by which the parent polls and kills it (its pid is in this
namespace). A zygote's scratch folder is removed once it has exited and been reaped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys

from envs import worker

MAX_MESSAGE = 1 << 16


def _reap(zygotes: dict[int, str]) -> None:
    """Collect exited zygotes (also any orphan reparented to us) and remove their scratch folders."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        scratch = zygotes.pop(pid, None)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _zygote(ctl: socket.socket, argv: list[str], fd: int, scratch: str, launcher_pid: int) -> None:
    """In the forked child: become the domain's zygote (envs.worker.main). Never returns."""
    code = 0
    try:
        ctl.close()  # the launcher's channel is not the zygote's
        os.setpgid(0, 0)
        os.environ["HOME"] = os.environ["TMPDIR"] = scratch
        worker.main([*argv, "--ctl", str(fd), "--scratch", scratch, "--scratch-writable", "1",
                     "--parent-pid", str(launcher_pid)])
    except BaseException:  # noqa: BLE001 - the parent sees the zygote's socket close
        code = 70
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", type=int, required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--libraries", default="{}")
    a = ap.parse_args(argv)
    worker.set_parent_death_signal()
    for name in worker.PRELOAD:  # once here: every zygote then finds them imported
        try:
            __import__(name)
        except ImportError:
            pass
    try:
        worker._import_pyseccomp(json.loads(a.libraries))
    except Exception:  # noqa: BLE001 - each zygote reports the missing layer
        pass
    ctl = socket.socket(fileno=a.ctl)
    ctl.setblocking(True)
    me = os.getpid()
    zygotes: dict[int, str] = {}
    serial = 0
    ctl.send(json.dumps({"ok": True, "landlock": worker.landlock_abi()}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, MAX_MESSAGE, 1)
        except OSError:
            return
        if not msg:
            return
        _reap(zygotes)
        try:
            req = json.loads(msg)
            if req.get("op") != "open" or len(fds) != 1 or not isinstance(req.get("argv"), list):
                raise ValueError(f"bad request {msg[:200]!r}")
            serial += 1
            scratch = os.path.join(a.scratch, f"z{serial}")
            os.mkdir(scratch, 0o700)
            pid = os.fork()
            if pid == 0:
                _zygote(ctl, [str(x) for x in req["argv"]], fds[0], scratch, me)
            zygotes[pid] = scratch
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(ctl, [json.dumps({"ok": True, "pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except Exception as exc:  # noqa: BLE001 - answered; the launcher serves the next request
            ctl.send(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
        finally:
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1:])
