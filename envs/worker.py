"""The sandbox worker: one persistent process per domain that runs untrusted tool code.

Started by envs.sandbox (inside bubblewrap where available) with `python -I -S`, so it imports
only the stdlib and the few envs modules below. It talks to the parent over a private pair of
inherited pipe fds (never stdout), in envs.pipe's frames; the binary payload carries database
images and a tool call's content as the JSON text the agent sees. Both ends spin briefly before
sleeping on the pipe (envs.pipe.spin_read).

Start-up order: read spec + seed, set rlimits, install seccomp, probe the layers, then import
tools.py (so its top-level code already runs confined), then serve requests until EOF.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import select
import signal
import sqlite3
import sys
import traceback
from typing import Any

from envs import state as state_mod
from envs import store
from envs.pipe import HEADER, spin_read
from envs.toolkit import DB, ToolError, guard_connection

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
# A call's content travels as the exact text an agent is shown (json.dumps' default separators).
_dumps_content = json.JSONEncoder(ensure_ascii=False, default=str).encode


# A light, duck-typed DomainSpec (no pydantic in here) -------------------------------------------
class _Obj:
    def __init__(self, d: dict[str, Any]):
        self.__dict__.update(d)


class LightTable(_Obj):
    def __init__(self, d: dict[str, Any]):
        super().__init__(d)
        self.columns = [_Obj({"type": "text", "nullable": True, "foreign_key": None, "policy": "exact",
                              "tolerance": 1e-6, **c}) for c in d["columns"]]

    def column(self, name: str) -> Any:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


class LightSpec(_Obj):
    def __init__(self, d: dict[str, Any]):
        super().__init__(d)
        self.tables = [LightTable(t) for t in d.get("tables", [])]
        self.tools = [_Obj(t) for t in d.get("tools", [])]
        self.clock = d.get("clock", "2024-05-15T15:00:00")

    def table(self, name: str) -> Any:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)


# Confinement ------------------------------------------------------------------------------------
DENY_SYSCALLS = [
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module",
    "delete_module", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "personality",
    "swapon", "swapoff", "acct", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "execve", "execveat", "fork", "vfork", "clone", "clone3", "kill", "setsid", "setpgid",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
]


# Signal handlers and timers are fixed once the worker is set up, so tool code cannot leave a trap
# for a later call (and the worker need not undo such tricks after every call).
SIGNAL_SYSCALLS = ["rt_sigaction", "sigaction", "signal", "timer_create"]


def set_rlimits(limits: dict[str, int]) -> bool:
    import resource

    names = {"as": resource.RLIMIT_AS, "nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC,
             "fsize": resource.RLIMIT_FSIZE, "cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE}
    for k, v in limits.items():
        resource.setrlimit(names[k], (v, v))
    return True


def install_seccomp() -> tuple[bool, bool]:
    """(filter loaded, signals and timers fixed: the per-call signal hygiene is not needed)."""
    try:
        import pyseccomp as seccomp
    except Exception:  # noqa: BLE001 - not available: reported as a missing layer
        return False, False
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENY_SYSCALLS + SIGNAL_SYSCALLS:
        try:
            f.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except Exception:  # noqa: BLE001 - syscall unknown on this architecture
            pass
    # ITIMER_REAL (0) is the worker's own time limit; VIRTUAL/PROF timers would kill a later call
    try:
        f.add_rule(seccomp.ERRNO(errno.EPERM), "setitimer", seccomp.Arg(0, seccomp.NE, 0))
        timers_fixed = True
    except Exception:  # noqa: BLE001 - no argument filters here: the worker keeps resetting timers per call
        timers_fixed = False
    f.load()
    return True, timers_fixed


def install_landlock(read_paths: list[str], write_paths: list[str]) -> bool:
    """Landlock (where the kernel has it): reads only under read_paths, writes only under
    write_paths; TCP bind/connect denied (ABI 4+); signals and abstract unix sockets scoped to
    the worker (ABI 6+). Returns False when the kernel lacks Landlock."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION)
    if abi < 1:
        return False

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    handled = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
    for bit, since in ((13, 2), (14, 3), (15, 5)):  # REFER, TRUNCATE, IOCTL_DEV
        if abi >= since:
            handled |= 1 << bit
    read = 1 | 4 | 8  # EXECUTE, READ_FILE, READ_DIR
    file_only = 1 | 2 | 4 | (1 << 14) | (1 << 15)
    attr = Ruleset(handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    rfd = libc.syscall(444, ctypes.byref(attr), size, 0)
    if rfd < 0:
        return False
    try:
        for paths, access in ((read_paths, read), (write_paths, handled)):
            for p in paths:
                try:
                    fd = os.open(p, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = access & handled
                    if not os.path.isdir(p):
                        allowed &= file_only
                    rule = PathBeneath(allowed, fd)
                    if libc.syscall(445, rfd, 1, ctypes.byref(rule), 0) < 0:
                        return False
                finally:
                    os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return False
        return libc.syscall(446, rfd, 0) == 0  # landlock_restrict_self
    finally:
        os.close(rfd)


def probe(scratch: str) -> dict[str, bool]:
    """What confinement this process actually sees (reported to the parent at start-up)."""
    import socket

    out: dict[str, bool] = {}
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect(("192.0.2.1", 9))
            out["socket_blocked"] = False
        except OSError:
            out["socket_blocked"] = True
        finally:
            s.close()
    except OSError:
        out["socket_blocked"] = True
    try:
        with open("/etc/passwd", "rb"):
            out["fs_hidden"] = False
    except OSError:
        out["fs_hidden"] = True
    out["fork_blocked"] = False
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    except OSError:
        out["fork_blocked"] = True
    out["uid"] = os.getuid()
    return out


# Serving ----------------------------------------------------------------------------------------
class _SoftTimeout(BaseException):
    """Raised by SIGALRM inside tool code (BaseException: `except Exception` cannot swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _SoftTimeout()


class Worker:
    def __init__(self, rfd: int, wfd: int, domain: str, time_limit: float, max_reply: int, spin_us: int = 0):
        self.rfd, self.wfd = rfd, wfd
        self.spin_ns = spin_us * 1000
        self._poll = select.poll()
        if rfd >= 0:
            os.set_blocking(rfd, False)  # see _read: spin, then poll
            self._poll.register(rfd, select.POLLIN)
        self.time_limit = time_limit
        self.max_reply = max_reply
        with open(os.path.join(domain, "spec.json"), encoding="utf-8") as fh:
            raw = json.load(fh)
        self.spec = LightSpec(raw)
        self.seed = store.load_seed_bytes(os.path.join(domain, raw.get("seed_path", "seed.sqlite")))
        self.conn = store.open_episode(self.seed)
        state_mod.register_functions(self.conn)
        self.guard = guard_connection(self.conn, time_limit)
        self.db = DB(self.conn, self.spec)
        self.plan = state_mod.StatePlan(self.spec.tables)
        self.seed_conn = store.open_episode(self.seed)
        state_mod.register_functions(self.seed_conn)
        self.seed_digests = self.plan.digests(self.seed_conn)
        self.seed_keyed: dict[str, dict] = {}  # per table, filled on first diff
        self.digests = dict(self.seed_digests)  # valid for every table not in guard.dirty
        self.table_names = {t.name for t in self.spec.tables}
        self.guard.dirty.clear()
        self.changes = self.conn.total_changes
        self.domain = domain
        self.code_path = os.path.join(domain, raw.get("code_path", "tools.py"))
        self.tools: dict[str, Any] = {}
        self._pending = b""
        self.load_error: str | None = None
        self.hygiene = True  # undo signal tricks after each call; off when seccomp forbids them

    def load_tools(self) -> None:
        try:
            spec = importlib.util.spec_from_file_location("domain_tools", self.code_path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["domain_tools"] = mod
            signal.setitimer(signal.ITIMER_REAL, self.time_limit * 2)
            try:
                spec.loader.exec_module(mod)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as exc:  # noqa: BLE001 - any failure is reported, never fatal
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
            self.load_error = f"tools.py failed to load: {type(exc).__name__}: {exc}\n" + "".join(tb)[-2000:]
            return
        for t in self.spec.tools:
            fn = getattr(mod, t.name, None)
            if callable(fn):
                self.tools[t.name] = fn

    # framing ------------------------------------------------------------------------------------
    def _read_exact(self, n: int) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            b = self._read(max(n - got, 1 << 16))
            if not b:
                return None
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)

    def _read(self, n: int) -> bytes:
        """The next bytes of a request: spin first (in a loop of calls the next request follows the
        reply within microseconds), then sleep until the pipe is readable (b"" at EOF)."""
        b = spin_read(self.rfd, n, self.spin_ns)
        while b is None:
            self._poll.poll()
            b = spin_read(self.rfd, n, 0)
        return b

    def recv(self) -> tuple[bytes, bytes] | None:
        """One request: (json body, binary payload); None at EOF. Usually a single read()."""
        buf = self._pending + (self._read_exact(HEADER.size - len(self._pending)) or b"") \
            if len(self._pending) < HEADER.size else self._pending
        if len(buf) < HEADER.size:
            return None
        n, m = HEADER.unpack_from(buf)
        total = HEADER.size + n + m
        if len(buf) < total:
            more = self._read_exact(total - len(buf))
            if more is None:
                return None
            buf += more
        self._pending = buf[total:]
        return buf[HEADER.size:HEADER.size + n], buf[HEADER.size + n:total]

    def send(self, obj: dict[str, Any], payload: bytes = b"", fallback: str = "reply") -> None:
        try:
            body = _dumps(obj).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            body = _dumps({"ok": False, "id": obj.get("id"),
                           "error": f"{fallback} returned a value that is not JSON: {exc}"}).encode()
        if len(body) > self.max_reply:
            body = _dumps({"ok": False, "id": obj.get("id"),
                           "error": f"tool output too large ({len(body)} bytes > {self.max_reply})"}).encode()
        data = HEADER.pack(len(body), len(payload)) + body + payload
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.wfd, view)
            except InterruptedError:
                continue
            view = view[n:]

    # tool calls ---------------------------------------------------------------------------------
    def run_tool(self, name: str, args: dict[str, Any], kind: str) -> tuple[dict[str, Any], bytes]:
        """(reply, the content as the JSON text the agent sees; b"" on errors)."""
        fn = self.tools.get(name)
        if fn is None:
            if self.load_error:
                return {"ok": False, "error": self.load_error}, b""
            return {"ok": False, "error": f"tool {name!r} is not implemented in tools.py"}, b""
        conn, guard = self.conn, self.guard
        guard.exit_tool()
        if conn.in_transaction:
            conn.rollback()
        conn.execute("BEGIN")
        guard.enter_tool()
        err = None
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, self.time_limit)
                out = fn(self.db, **args)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)  # a late alarm lands in the handler below
        except BaseException as exc:  # noqa: BLE001 - SystemExit & co. are tool errors too
            err = self._describe(name, exc)
            exc = None  # frees the tool's frames (and memory) now, with the timer off
        finally:
            guard.exit_tool()
            if self.hygiene:
                self._signal_hygiene()
        try:
            if err is None and kind == "write":
                conn.execute("COMMIT")
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.rollback()
            err = f"tool {name} failed: could not commit: {exc}"
        if err is not None:
            return {"ok": False, "error": err}, b""
        if isinstance(out, str) and len(out) > self.max_reply:  # the common case, caught before encoding
            return {"ok": False, "error": f"tool output too large ({len(out)} characters > {self.max_reply} bytes)"}, b""
        try:
            text = _dumps_content(out).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            return {"ok": False, "error": f"tool {name} returned a value that is not JSON: {exc}"}, b""
        if len(text) > self.max_reply:
            return {"ok": False, "error": f"tool output too large ({len(text)} bytes > {self.max_reply})"}, b""
        return {"ok": True, "content": out}, text

    def _describe(self, name: str, exc: BaseException) -> str:
        if isinstance(exc, ToolError):
            return str(exc) or "tool error"
        if isinstance(exc, _SoftTimeout):
            return f"tool {name} exceeded its time limit of {self.time_limit:g} s"
        if isinstance(exc, RecursionError):
            return f"tool {name} failed: recursion too deep"
        if isinstance(exc, MemoryError):
            return f"tool {name} failed: out of memory"
        if isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc):
            return f"tool {name} exceeded its time limit of {self.time_limit:g} s (database query interrupted)"
        if isinstance(exc, sqlite3.Error):
            return f"tool {name} failed: database error: {exc}"
        return f"tool {name} failed: {type(exc).__name__}: {exc}"

    def _signal_hygiene(self) -> None:
        """Undo timer tricks of tool code so they cannot hit a later call (other signals cannot
        arrive: kill() is denied by seccomp and the parent only ever sends SIGKILL)."""
        if signal.getsignal(signal.SIGALRM) is not _alarm:
            signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)

    # dispatch -----------------------------------------------------------------------------------
    def current_digests(self) -> dict[str, str]:
        """Per-table digests, recomputed only for tables a statement may have written since the
        last computation (the guard marks them); everything when changes went unmarked."""
        dirty = self.guard.dirty
        if self.conn.total_changes != self.changes and not dirty:
            dirty = self.table_names  # changes we could not attribute: recompute all
        for p in self.plan.tables:
            if p.name in dirty:
                self.digests[p.name] = p.digest(self.conn)
        self.guard.rearm()  # expires prepared statements: a reused one is authorized (marked) again
        self.changes = self.conn.total_changes
        return self.digests

    def handle(self, req: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        op = req.get("op")
        if op == "call":
            # The content goes as the payload, encoded once: the parent hands the text to the agent
            # and parses it only if someone reads ToolResult.content.
            res, text = self.run_tool(req["name"], req["args"], req.get("kind", "write"))
            return ({"ok": True}, text) if res["ok"] else (res, b"")
        if op == "batch":
            return {"ok": True, "results": [self.run_tool(n, a, k)[0] for n, a, k in req["calls"]]}, b""
        if op == "reset":
            if self.conn.in_transaction:
                self.conn.rollback()
            self.guard.load(payload or self.seed)
            self.digests = dict(self.seed_digests) if not payload else self.plan.digests(self.conn)
            self.guard.dirty.clear()
            self.changes = self.conn.total_changes
            return {"ok": True}, b""
        if op == "hash":
            return {"ok": True, "hash": self.plan.combine(self.current_digests())}, b""
        if op == "diff":
            if payload:
                other = store.open_episode(payload)
                state_mod.register_functions(other)
                d = self.plan.diff(other, self.conn, after_digests=self.current_digests())
                other.close()
            else:
                d = self.plan.diff(self.seed_conn, self.conn, self.seed_digests, self.current_digests(),
                                   self.seed_keyed)
            return {"ok": True, "diff": d}, b""
        if op == "snapshot":
            return {"ok": True}, bytes(self.conn.serialize())
        if op == "ping":
            return {"ok": True}, b""
        return {"ok": False, "error": f"unknown op {op!r}"}, b""

    def serve(self) -> None:
        while True:
            got = self.recv()
            if got is None:
                return
            body, payload = got
            fallback, rid = "reply", None
            try:
                req = json.loads(body)
                rid = req.get("id")
                if req.get("op") == "call":
                    fallback = f"tool {req.get('name')}"
                reply, out = self.handle(req, payload)
            except MemoryError:
                reply, out = {"ok": False, "error": f"{fallback} failed: out of memory"}, b""
            except BaseException as exc:  # noqa: BLE001 - a bad request never kills the worker
                reply, out = {"ok": False, "error": f"{fallback} failed: worker error: {type(exc).__name__}: {exc}"}, b""
            reply["id"] = rid
            self.send(reply, out, fallback)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rfd", type=int, required=True)
    ap.add_argument("--wfd", type=int, required=True)
    ap.add_argument("--domain", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--max-reply", type=int, default=4 << 20)
    ap.add_argument("--spin-us", type=int, default=0)
    ap.add_argument("--limits", default="{}")
    ap.add_argument("--seccomp", type=int, default=1)
    ap.add_argument("--landlock", type=int, default=1)
    ap.add_argument("--lib", default="")
    ap.add_argument("--tmp", type=int, default=0)
    a = ap.parse_args(argv)
    os.chdir(a.scratch)
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    w = Worker(a.rfd, a.wfd, a.domain, a.time_limit, a.max_reply, a.spin_us)
    layers: dict[str, Any] = {"rlimits": set_rlimits(json.loads(a.limits))}
    devnull = os.open(os.devnull, os.O_RDWR)
    if a.seccomp:
        try:  # import before Landlock: finding libseccomp runs ldconfig and opens /dev/null
            import pyseccomp  # noqa: F401
        except Exception:  # noqa: BLE001 - reported as a missing layer below
            pass
    if a.landlock:
        prefix = os.path.realpath(sys.base_prefix)
        reads = [prefix, "/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", a.lib, a.domain,
                 os.path.dirname(os.path.realpath(sys.executable))]
        try:
            writes = [a.scratch, "/dev/null", "/dev/zero"] + (["/tmp"] if a.tmp else [])
            layers["landlock"] = install_landlock(reads + ["/dev/urandom"], writes)
        except Exception:  # noqa: BLE001 - reported as a missing layer
            layers["landlock"] = False
    else:
        layers["landlock"] = False
    layers["seccomp"], signals_fixed = install_seccomp() if a.seccomp else (False, False)
    w.hygiene = not signals_fixed
    layers.update(probe(a.scratch))
    # From here on nothing reaches the parent except over the private pipe.
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    w.load_tools()
    w.send({"ok": True, "layers": layers, "load_error": w.load_error,
            "missing": [t.name for t in w.spec.tools if t.name not in w.tools]})
    w.serve()


if __name__ == "__main__":
    main()
