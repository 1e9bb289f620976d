"""The sandbox worker: a zygote per domain that forks one child per episode to run untrusted tool code.

Started by envs.sandbox (inside bubblewrap where available) with `python -I -S` and an empty
environment but for a few fixed variables, so it imports only the stdlib and the few envs modules
below and sees no secret of the caller.

Zygote (never runs tool code): reads spec and seed, loads the seed into an episode connection, sets
rlimits, Landlock and its seccomp filter (no sockets, exec, signal handlers, setrlimit ...), then
forks a spare child and keeps one forked ahead. It talks to the parent over a private unix socket
(`--ctl`): on `next` it kills the current child (SIGKILL + wait), empties the scratch mount, lets
the spare go and hands the parent the spare's two pipe ends (SCM_RIGHTS). Every episode thus
starts in a process that is a copy-on-write image of the zygote: module state, SQL functions on
the connection, the db helper, scratch files and rlimits of a previous episode cannot reach it.

Child (runs tool code): adds a seccomp filter of its own (no fork/clone, no signal to any
process), reports what confinement it sees (the first child only: the isolation report goes to
the parent before any tool code is loaded), waits for `go`, imports tools.py, then serves
envs.pipe frames on its own pipe pair until EOF. Its replies echo the request's nonce (envs.pipe);
state hashing and diffs are done by the parent from `snapshot` bytes, never in here.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import sqlite3
import sys
# signal.getsignal maps the handler onto an enum, which raises and catches ValueError for a function
# handler (3.4 us of every call's signal hygiene); the C function underneath answers in 20 ns.
from _signal import getsignal as _getsignal
from itertools import repeat
from operator import attrgetter, is_
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import Any, NamedTuple

from envs import image
from envs.pipe import HEADER, MAX_NESTING, NO_NONCE, OK_BODY, spin_read, too_deep
from envs.toolkit import DB, ToolError, guard_connection

# Captured once: tool code rebinding json.loads / json.dumps does not reach the protocol.
_scan = json.scanner.make_scanner(json.JSONDecoder())
_json_loads = json.loads


def _loads(data: bytes | str) -> Any:
    """json.loads for the parent's frames (UTF-8, compact) without json.loads' work per value
    (encoding detection, two whitespace regexes: 3 us of every call's 5 on a slow core). Anything
    but one bare value is left to json.loads, which reads or refuses it as before."""
    s = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    try:
        obj, end = _scan(s, 0)
    except StopIteration:
        end = -1
    return obj if end == len(s) else _json_loads(s)


def _encoder(item_sep: str, key_sep: str) -> Any:
    """JSONEncoder(separators, ensure_ascii=False, default=str).encode, with json's C encoder made
    once rather than per value (json's iterencode makes one per call: ~1.5 us of a call's content).
    It keeps no circular-reference markers, so a cycle raises RecursionError rather than ValueError
    (refused alike). Where the C encoder is missing or answers differently on a probe: the stdlib's."""
    slow = json.JSONEncoder(separators=(item_sep, key_sep), ensure_ascii=False, default=str).encode
    try:
        fast = json.encoder.c_make_encoder(None, str, json.encoder.c_encode_basestring, None,  # type: ignore[misc]
                                           key_sep, item_sep, False, False, True)
        probe = {"k": [1, 2.5, None, True, "\u00e9\ud800", float("nan"), -0.0, 10**20], "n": {}, "o": object}
        if "".join(fast(probe, 0)) != slow(probe):
            return slow
    except Exception:  # noqa: BLE001 - another Python's C encoder: the stdlib's path
        return slow

    def encode(o: Any) -> str:
        return slow(o) if type(o) is str else "".join(fast(o, 0))  # a string: json's own shortcut

    return encode


_dumps = _encoder(",", ":")
_OK: dict[str, Any] = {"ok": True}  # a successful call's reply: sent as OK_BODY, encoded once
# A call's content travels as the exact text an agent is shown (json.dumps' default separators).
_dumps_content = _encoder(", ", ": ")

# Imported by the zygote so a child's `import json` is a dictionary lookup, not a file read: the
# stdlib modules statically checked tool code may import (tasks/environments/codecheck.ALLOWED; a
# test keeps the two equal), each only when tools.py names it (`named`): every worker's start pays
# for what it imports (statistics, decimal and datetime were a third of it, for tools that use
# none of them), and hand-written tools.py importing others pays once per child.
PRELOAD = ("json", "re", "math", "datetime", "decimal", "itertools", "collections", "functools", "string",
           "statistics", "typing")
MAX_SCRATCH_FILES = 1024  # tmpfs caps bytes, not inodes: a call that leaves more files fails and is wiped


# What tools.py's module holds after it ran (run_episodes: run it again only if that changed) ------
MODULE = "domain_tools"
_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_MISSING = object()


def _frozen(value: Any) -> bool:
    """Nothing in it can change: exact atom types (a subclass instance may carry attributes) and
    tuples / frozensets of them."""
    t = type(value)
    return t in _ATOMS or ((t is tuple or t is frozenset) and all(_frozen(v) for v in value))


class ModuleState(NamedTuple):
    """module_state's record: the globals (names, values), the functions the module defined with
    what can be set on them, and a copy of each keyword-defaults dict (it can change in place)."""

    names: tuple[str, ...]
    values: tuple[Any, ...]
    functions: tuple[FunctionType, ...]
    codes: tuple[Any, ...]
    defaults: tuple[Any, ...]
    kwdefaults: tuple[Any, ...]
    kwcopies: tuple[tuple[FunctionType, dict[str, Any]], ...]


def module_state(ns: dict[str, Any]) -> ModuleState | None:
    """What of a module namespace just run could change, to compare after an episode with
    module_unchanged: every global by identity, and for each function the module defined, what
    can be set on it (code, defaults, keyword defaults, attributes). None when a global is
    something whose changes this cannot see (a list, a dict, an instance, a class or closure the
    module made): such a module runs again before every episode. Modules, builtins and what the
    module imported from elsewhere are shared by the whole process whether it runs again or not."""
    fns = []
    for k, v in ns.items():
        if type(v) is FunctionType and v.__module__ == MODULE:
            kw = v.__kwdefaults__
            if (v.__closure__ is not None or v.__dict__ or not (v.__defaults__ is None or _frozen(v.__defaults__))
                    or not (kw is None or all(_frozen(x) for x in kw.values()))):
                return None
            fns.append(v)
        elif not (k == "__builtins__" or _frozen(v) or isinstance(v, (ModuleType, BuiltinFunctionType, FunctionType))
                  or (isinstance(v, type) and v.__module__ != MODULE)):
            return None
    return ModuleState(tuple(ns), tuple(ns.values()), tuple(fns), tuple(f.__code__ for f in fns),
                       tuple(f.__defaults__ for f in fns), tuple(f.__kwdefaults__ for f in fns),
                       tuple((f, dict(f.__kwdefaults__)) for f in fns if f.__kwdefaults__))


_code, _defaults = attrgetter("__code__"), attrgetter("__defaults__")
_kwdefaults, _attributes = attrgetter("__kwdefaults__"), attrgetter("__dict__")


def module_unchanged(ns: dict[str, Any], state: ModuleState) -> bool:
    """The namespace holds what module_state saw: the same globals, and its functions the same
    code, defaults and keyword defaults, and no attributes set on them. (The loops run in C: this
    is on every replayed episode's path.)"""
    fns = state.functions
    return (len(ns) == len(state.names)
            and all(map(is_, map(ns.get, state.names, repeat(_MISSING)), state.values))
            and all(map(is_, map(_code, fns), state.codes))
            and all(map(is_, map(_defaults, fns), state.defaults))
            and all(map(is_, map(_kwdefaults, fns), state.kwdefaults))
            and not any(map(_attributes, fns))
            and all(f.__kwdefaults__ == kw for f, kw in state.kwcopies))


# A light, duck-typed DomainSpec (no pydantic in here) -------------------------------------------
class _Obj:
    def __init__(self, d: dict[str, Any]):
        self.__dict__.update(d)


class LightTable(_Obj):
    def __init__(self, d: dict[str, Any]):
        super().__init__(d)
        self.columns = [_Obj({"type": "text", "nullable": True, "foreign_key": None, "policy": "exact",
                              "tolerance": 1e-6, **c}) for c in d["columns"]]


class LightSpec(_Obj):
    def __init__(self, d: dict[str, Any]):
        super().__init__(d)
        self.tables = [LightTable(t) for t in d.get("tables", [])]
        self.tools = [_Obj(t) for t in d.get("tools", [])]
        self.clock = d.get("clock", "2024-05-15T15:00:00")


# Confinement ------------------------------------------------------------------------------------
DENY_SYSCALLS = [
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module",
    "delete_module", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "personality",
    "swapon", "swapoff", "acct", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "execve", "execveat", "setsid", "setpgid", "kcmp", "process_madvise", "process_mrelease",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setrlimit",  # limits are set once, before the filter: tool code cannot lower them for a later call
]
# Signal handlers and timers are fixed once the zygote is set up, so tool code cannot leave a trap
# for a later call (and the worker need not undo such tricks after every call).
SIGNAL_SYSCALLS = ["rt_sigaction", "sigaction", "signal", "timer_create"]
# Added in each child: no new processes or threads, no signal to any process (the zygote, the next
# episode's child; the child itself too: nothing in the worker needs it), no handles on processes.
CHILD_SYSCALLS = ["fork", "vfork", "clone", "clone3", "kill", "tkill", "tgkill", "rt_sigqueueinfo",
                  "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "pidfd_getfd"]


def named(code: Any) -> set[str]:
    """Every name tools.py's compiled code (its functions' too) uses as a global, attribute or module
    name (co_names): a superset of the modules it imports (`import a.b` gives "a.b" and "a")."""
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        names.update(n.split(".", 1)[0] for n in c.co_names if "." in n)
        stack.extend(k for k in c.co_consts if isinstance(k, type(code)))
    return names


def set_rlimits(limits: dict[str, int]) -> bool:
    import resource

    names = {"as": resource.RLIMIT_AS, "nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC,
             "fsize": resource.RLIMIT_FSIZE, "cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE}
    for k, v in limits.items():
        resource.setrlimit(names[k], (v, v))
    return True


def _deny(f: Any, seccomp: Any, name: str, *args: Any) -> bool:
    try:
        f.add_rule(seccomp.ERRNO(errno.EPERM), name, *args)
        return True
    except Exception:  # noqa: BLE001 - syscall unknown on this architecture, or no argument filters
        return False


def install_seccomp() -> tuple[bool, bool]:
    """The zygote's filter, inherited by every child. (loaded, argument rules worked: timers and
    rlimits fixed, so the per-call signal hygiene is not needed)."""
    try:
        import pyseccomp as seccomp
    except Exception:  # noqa: BLE001 - not available: reported as a missing layer
        return False, False
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENY_SYSCALLS + SIGNAL_SYSCALLS:
        _deny(f, seccomp, name)
    # ITIMER_REAL (0) is the worker's own time limit; VIRTUAL/PROF timers would kill a later call.
    # prlimit64 with a new limit is setrlimit by another name (reading a limit stays allowed).
    fixed = _deny(f, seccomp, "setitimer", seccomp.Arg(0, seccomp.NE, 0))
    if not _deny(f, seccomp, "prlimit64", seccomp.Arg(2, seccomp.NE, 0)):
        fixed = _deny(f, seccomp, "prlimit64") and False
    f.load()
    return True, fixed


def child_seccomp() -> Any:
    """The children's own filter (on top of the zygote's), built once in the zygote; each child
    loads it. None without pyseccomp."""
    try:
        import pyseccomp as seccomp
    except Exception:  # noqa: BLE001
        return None
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in CHILD_SYSCALLS:
        _deny(f, seccomp, name)
    return f


def set_parent_death_signal() -> None:
    """SIGKILL when the parent goes (also when it is SIGKILLed): no orphan outlives its caller."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(444, None, 0, 1))  # landlock_create_ruleset(NULL, 0, VERSION)


def install_landlock(read_paths: list[str], write_paths: list[str]) -> bool:
    """Landlock (where the kernel has it): reads only under read_paths, writes only under
    write_paths; TCP bind/connect denied (ABI 4+); signals and abstract unix sockets scoped to
    the worker (ABI 6+). Returns False when the kernel lacks Landlock."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = landlock_abi()
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


def probe() -> dict[str, Any]:
    """What confinement this process actually sees (the first child's view, reported at start-up)."""
    out: dict[str, Any] = {}
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
    out["secrets_hidden"] = not any(k not in ALLOWED_ENV for k in os.environ)
    return out


# What envs.sandbox.worker_env passes, plus what bwrap (PWD) and Python (LC_CTYPE, PEP 538) add.
ALLOWED_ENV = frozenset({"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PWD", "LC_CTYPE"})


def wipe(root: str) -> None:
    """Remove everything under root (iteratively: tool code may nest directories deeply)."""
    stack, dirs = [root], []
    while stack:
        d = stack.pop()
        dirs.append(d)
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        try:
                            os.unlink(e.path)
                        except OSError:
                            pass
        except OSError:
            pass
    for d in reversed(dirs[1:]):
        try:
            os.rmdir(d)
        except OSError:
            pass


def empty_size(folder: str) -> int | None:
    """The size `folder` (empty now) reports, when its size tells whether it is empty: a file and
    a folder made in it each change the size, and removing them restores it (tmpfs counts a
    folder's entries in its size; ext4 keeps a block's size whatever it holds). Else None."""
    probe = os.path.join(folder, ".empty-size-probe")
    try:
        empty = os.stat(folder).st_size
        sizes = []
        for make, remove in ((lambda: open(probe, "xb").close(), os.unlink), (lambda: os.mkdir(probe), os.rmdir)):
            make()
            try:
                sizes.append(os.stat(folder).st_size)
            finally:
                remove(probe)
            sizes.append(os.stat(folder).st_size)
    except OSError:
        return None
    return empty if sizes[0] != empty and sizes[2] != empty and sizes[1] == sizes[3] == empty else None


# Serving ----------------------------------------------------------------------------------------
class _SoftTimeout(BaseException):
    """Raised by SIGALRM inside tool code (BaseException: `except Exception` cannot swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _SoftTimeout()


class Worker:
    """One episode's tool runtime (a child's state; built in the zygote, used after fork)."""

    def __init__(self, domain: str, time_limit: float, max_reply: int, spin_us: int = 0, scratch: str | None = None):
        self.rfd = self.wfd = -1
        self.spin_ns = spin_us * 1000
        self.on_cpu: int | None = None  # the caller's CPU this child last moved to (envs.sandbox: cpu="caller")
        self.time_limit = time_limit
        self.max_reply = max_reply
        self.scratch = scratch  # the writable tmpfs to police after each call (None: not writable)
        if scratch is not None and os.listdir(scratch):
            # it is emptied when a tool leaves too many files: never a shared folder such as /tmp
            raise ValueError(f"scratch {scratch} must be an empty folder of this worker's own; it holds files")
        # the size the empty scratch folder reports, where its size counts its entries (tmpfs): one
        # stat then tells that an episode left it empty, where emptying it took five system calls
        # and a walk (a tenth of the replay child's work); None: every episode empties it
        self.empty_scratch_size = empty_size(scratch) if scratch is not None else None
        with open(os.path.join(domain, "spec.json"), encoding="utf-8") as fh:
            raw = json.load(fh)
        self.spec = LightSpec(raw)
        self.seed = image.load_seed_bytes(os.path.join(domain, raw.get("seed_path", "seed.sqlite")))
        self.conn, self.guard, self.db = self._episode_connection()
        self.code_path = os.path.join(domain, raw.get("code_path", "tools.py"))
        # what of the domain's folder a child may read (Landlock): the folder may hold more (a build's
        # staging folder, or a shared launcher's view of every domain: envs.launcher)
        self.files = [os.path.join(domain, "spec.json"), self.code_path,
                      os.path.join(domain, raw.get("seed_path", "seed.sqlite"))]
        self.code: Any = None
        self.load_error: str | None = None
        try:  # compiled once here (compiling runs nothing); executed in each child
            with open(self.code_path, "rb") as fh:
                self.code = compile(fh.read(), self.code_path, "exec", dont_inherit=True)
        except (OSError, SyntaxError, ValueError) as exc:
            self.load_error = self._load_failure(exc)
        self.tools: dict[str, Any] = {}
        # the tools dict tools.py's last run filled, its namespace, and what that held after the
        # run (module_state; None: run it every time)
        self.ran_tools: tuple[dict[str, Any], dict[str, Any], ModuleState | None] | None = None
        # Hosted episodes (envs.hosted): slot id -> (conn, guard, db, tools); the fields above are
        # the current slot's. Slot 0 is the child's own episode.
        self.slots: dict[int, tuple[Any, Any, Any, dict[str, Any]]] = {}
        self.slot = 0
        self._pending = b""
        self._poll = select.poll()
        self.hygiene = True  # undo signal tricks after each call; off when seccomp forbids them
        self.reads_counters = False  # tool SQL read SQLite's change counters (see run_episodes)

    def _episode_connection(self) -> tuple[sqlite3.Connection, Any, DB]:
        """A connection holding a fresh copy of the seed, its guard and the db helper tool code gets."""
        conn = image.open_episode(self.seed)
        conn.execute("PRAGMA temp_store = MEMORY")  # sorts and temp b-trees count in RLIMIT_AS, not on disk
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # schema parsed once (in the zygote: shared)
        return conn, guard_connection(conn, self.time_limit), DB(conn, self.spec)

    def warm(self) -> None:
        """Touch what the first call needs (copy-on-write faults, SQLite's parsed schema) before the
        child is handed out."""
        self.conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        _loads(_dumps({"op": "call", "name": "x", "args": {"k": [1, 2.5, None]}, "kind": "read"}))
        _dumps_content({"k": [1, 2.5, None, "x"]}).encode("utf-8", "surrogatepass")

    def attach(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        os.set_blocking(rfd, not self.spin_ns)  # see _read: spin, then poll; or just block
        self._poll.register(rfd, select.POLLIN)

    @staticmethod
    def _load_failure(exc: BaseException) -> str:
        import traceback  # only when tools.py fails to load: every worker's start would pay for it

        tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        return f"tools.py failed to load: {type(exc).__name__}: {exc}\n" + "".join(tb)[-2000:]

    def load_tools(self) -> None:
        """Run tools.py (tool code's first run: only in a child, never in the zygote)."""
        if self.code is None:
            return
        self.ran_tools = None
        mod = type(sys)(MODULE)
        mod.__file__ = self.code_path
        sys.modules[MODULE] = mod
        try:
            signal.setitimer(signal.ITIMER_REAL, self.time_limit * 2)
            try:
                exec(self.code, mod.__dict__)  # noqa: S102 - confined child, tool code by design
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as exc:  # noqa: BLE001 - any failure is reported, never fatal
            self.load_error = self._load_failure(exc)
            return
        for t in self.spec.tools:
            fn = mod.__dict__.get(t.name)
            if callable(fn):
                self.tools[t.name] = fn
        self.ran_tools = (self.tools, mod.__dict__, module_state(mod.__dict__))

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
        reply within microseconds), then sleep until the pipe is readable (b"" at EOF). Without
        spinning the pipe blocks: one read, no failed read and poll before it."""
        if not self.spin_ns:
            return os.read(self.rfd, n)
        b = spin_read(self.rfd, n, self.spin_ns)
        while b is None:
            self._poll.poll()
            b = spin_read(self.rfd, n, 0)
        return b

    def recv(self) -> tuple[bytes, bytes, bytes] | None:
        """One request: (json body, binary payload, nonce); None at EOF. Usually a single read()."""
        buf = self._pending + (self._read_exact(HEADER.size - len(self._pending)) or b"") \
            if len(self._pending) < HEADER.size else self._pending
        if len(buf) < HEADER.size:
            return None
        n, m, nonce = HEADER.unpack_from(buf)
        total = HEADER.size + n + m
        if len(buf) < total:
            more = self._read_exact(total - len(buf))
            if more is None:
                return None
            buf += more
        self._pending = buf[total:]
        return buf[HEADER.size:HEADER.size + n], buf[HEADER.size + n:total], nonce

    def send(self, obj: dict[str, Any], payload: bytes, nonce: bytes, fallback: str = "reply") -> None:
        try:
            body = OK_BODY if obj is _OK else _dumps(obj).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            body = _dumps({"ok": False, "error": f"{fallback} returned a value that is not JSON: {exc}"}).encode()
        if len(body) > self.max_reply:
            body = _dumps({"ok": False, "error": f"tool output too large ({len(body)} bytes > {self.max_reply})"}).encode()
        data = HEADER.pack(len(body), len(payload), nonce) + body + payload
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.wfd, view)
            except InterruptedError:
                continue
            view = view[n:]

    # tool calls ---------------------------------------------------------------------------------
    def run_tool(self, name: str, args: dict[str, Any], kind: str) -> tuple[dict[str, Any], bytes]:
        """(reply, the content as the JSON text the agent sees; b"" on errors). Every check on the
        result runs before a write commits: a call that is reported failed leaves no trace."""
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
        err, text = None, b""
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
        if err is None:
            err, text = self._encode(name, out)
        if err is None and self.scratch is not None:
            err = self._police_scratch(name)
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
        return {"ok": True, "content": out}, text

    def run_episodes(self, episodes: list[list[list[Any]]], images: bool = False) -> tuple[dict[str, Any], bytes]:
        """Many episodes in this child, one after another, each from the seed, with tools.py's
        module as a fresh run leaves it (run again when tool code changed it: its module globals do
        not carry over) and scratch emptied (nor do its files) —
        verification's replay, without a fork per episode. The texts of successful calls and the database image of each episode that
        committed a write go in the payload; the reply gives their lengths: per call [true, n] or
        [false, error], per episode the image's length or -1 when nothing was committed (reads and
        failed calls are rolled back: the episode ended at the seed). `images`: every episode's
        image, also of those that committed nothing (for a caller that re-measures that they did not)."""
        # the module is checked before the first episode too: tool code may have run in this child
        # before the round trip (calls, an earlier round trip), changing its module globals
        parts, out, dirty, ran = [], [], True, True
        for calls in episodes:
            while True:
                # The connection is kept from one episode to the next and the seed loaded into it
                # again: its prepared statements and parsed schema stay (a new connection per
                # episode that wrote was 40% of this child's work). What it carries is SQLite's
                # change counters (changes(), total_changes(), last_insert_rowid()); tool SQL that
                # reads them (seen when prepared: Guard.counters) gets a new connection per episode
                # from then on, counters at 0 as in a fresh child, and the episode that first read
                # them on a carried connection runs again on one. Not seen: tool code reading them
                # through Python (conn.total_changes, a cursor's lastrowid after a statement other
                # than an INSERT); a replay that differs so is confirmed in a fresh child
                # (tasks.verify.replay), as one that a patched module changed.
                self.reads_counters = self.reads_counters or self.guard.counters
                carried = self.conn.total_changes != 0
                if carried and self.reads_counters:
                    self._new_connection()
                    dirty, carried = False, False
                conn = self.conn
                if conn.in_transaction:
                    conn.rollback()
                if dirty:
                    self.guard.load(self.seed, same_schema=True)
                # what tool code may have set on the connection, back to a new connection's values
                conn.row_factory, conn.text_factory, conn.isolation_level = None, str, None
                if ran:
                    # tools.py runs again only when its module changed (module_unchanged: as it
                    # was after it ran, which is what running it again would give); running it
                    # before every episode was about a sixth of this child's work
                    self._tools_afresh()
                mark = len(parts)
                results, dirty, ran = [], False, bool(calls)
                for name, args, kind in calls:
                    res, text = self.run_tool(name, args, kind)
                    if res["ok"]:
                        parts.append(text)
                        results.append([True, len(text)])
                        dirty = dirty or kind == "write"
                    else:
                        results.append([False, res["error"]])
                if carried and self.guard.counters and not self.reads_counters:
                    del parts[mark:]  # read the counters of an earlier episode: again, on a new connection
                    continue
                break
            image = bytes(conn.serialize()) if dirty or images else b""
            parts.append(image)
            out.append([results, len(image) if dirty or images else -1])
        return {"ok": True, "episodes": out}, b"".join(parts)

    def _encode(self, name: str, out: Any) -> tuple[str | None, bytes]:
        if isinstance(out, str) and len(out) > self.max_reply:  # the common case, caught before encoding
            return f"tool output too large ({len(out)} characters > {self.max_reply} bytes)", b""
        try:
            text = _dumps_content(out).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError, RecursionError, OverflowError, MemoryError) as exc:
            return f"tool {name} returned a value that is not JSON: {type(exc).__name__}: {exc}", b""
        if len(text) > self.max_reply:
            return f"tool output too large ({len(text)} bytes > {self.max_reply})", b""
        if text.count(b"[") + text.count(b"{") > MAX_NESTING and too_deep(text):  # counts: the cheap screen
            return f"tool {name} returned a value nested deeper than {MAX_NESTING} levels", b""
        return None, text

    def _scratch_empty(self) -> bool:
        """Does scratch hold nothing? By its size, where that counts its entries (empty_size)."""
        if self.empty_scratch_size is None:
            return False
        try:
            return os.stat(self.scratch).st_size == self.empty_scratch_size  # type: ignore[arg-type]
        except OSError:
            return False

    def _police_scratch(self, name: str) -> str | None:
        """tmpfs caps scratch bytes but not files (inodes are kernel memory): too many, and the
        call fails and scratch is emptied."""
        try:
            st = os.statvfs(self.scratch)
        except OSError:
            return None
        if st.f_files - st.f_ffree <= MAX_SCRATCH_FILES:
            return None
        wipe(self.scratch)
        return f"tool {name} failed: it left more than {MAX_SCRATCH_FILES} files in scratch (emptied)"

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
        if _getsignal(signal.SIGALRM) is not _alarm:
            signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)

    # dispatch -----------------------------------------------------------------------------------
    def _switch(self, slot: int) -> None:
        """Make `slot` the current episode (its connection, db helper and tool functions)."""
        if slot == self.slot:
            return
        if slot not in self.slots and slot != 0:
            raise KeyError(f"episode slot {slot} is not open")
        self.slots[self.slot] = (self.conn, self.guard, self.db, self.tools)
        self.conn, self.guard, self.db, self.tools = self.slots.pop(slot)
        self.slot = slot

    def open_slot(self, slot: int) -> None:
        """A hosted episode from the seed, with tools.py run afresh for it (module globals of one
        episode do not reach another); an open slot of that id is replaced."""
        if slot == 0:
            raise ValueError("slot 0 is the child's own episode")
        self.close_slot(slot)
        made = self._episode_connection()  # first: if it fails (out of memory), nothing has changed
        self.slots[self.slot] = (self.conn, self.guard, self.db, self.tools)
        (self.conn, self.guard, self.db), self.tools = made, {}
        self.slot = slot
        self.load_tools()

    def close_slot(self, slot: int) -> None:
        if slot == self.slot:
            self._switch(0)
        got = self.slots.pop(slot, None) if slot != 0 else None
        if got is not None:
            got[0].close()

    def run_many(self, calls: list[list[Any]]) -> tuple[dict[str, Any], bytes]:
        """One call each of many hosted episodes in one round trip (a vectorized step), in order,
        each on its own slot (its rows, its db helper, its tools.py globals). Per call [true, n]
        (the text, n bytes, goes in the payload) or [false, error]."""
        parts, out = [], []
        for slot, name, args, kind in calls:
            try:
                self._switch(int(slot))
            except KeyError:
                out.append([False, f"episode slot {slot} is not open in this sandbox child"])
                continue
            res, text = self.run_tool(name, args, kind)
            if res["ok"]:
                parts.append(text)
                out.append([True, len(text)])
            else:
                out.append([False, res["error"]])
        return {"ok": True, "results": out}, b"".join(parts)

    def restart(self) -> None:
        """A new episode from the seed in this child, without a fork (the scenario stage's walks,
        one after another): a new connection holding the seed (nothing of the last one's state or
        counters, such as changes() or last_insert_rowid()), a new db helper, tools.py's module as
        a fresh run leaves it (run again in a new namespace when tool code changed it, as
        run_episodes does: its globals start over) and the scratch mount emptied (files a tool
        wrote are gone). A failure leaves the child's state unknown: it exits (the parent sees a
        crash and gets a fresh child, which holds the seed too)."""
        try:
            self._new_connection()
            self._tools_afresh()
        except BaseException:  # noqa: BLE001 - half restarted: no episode may run on it
            os._exit(72)

    def _new_connection(self) -> None:
        """The current connection replaced by a new one holding the seed (counters at 0)."""
        made = self._episode_connection()
        self.conn.close()
        self.conn, self.guard, self.db = made

    def _tools_as_run(self) -> bool:
        """The current tools (a hosted slot has its own) are those of tools.py's last run, and its
        module holds what it held after that run."""
        if self.ran_tools is None:
            return False
        tools, ns, state = self.ran_tools
        return tools is self.tools and state is not None and module_unchanged(ns, state)

    def _tools_afresh(self) -> None:
        """Scratch emptied, and tools.py run again in a new module namespace unless its module
        still holds what its last run left (_tools_as_run)."""
        if self.scratch is not None and not self._scratch_empty():
            wipe(self.scratch)
        if not self._tools_as_run():
            self.tools = {}
            self.load_tools()

    def handle(self, req: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        op = req.get("op")
        slot = req.get("ep")
        if req.get("restart") and slot is None:
            self.restart()
        if slot is not None:
            if op == "open_ep":
                self.open_slot(int(slot))
                return {"ok": True, "load_error": self.load_error}, b""
            if op == "close_ep":
                self.close_slot(int(slot))
                return {"ok": True}, b""
            self._switch(int(slot))
        if op == "call":
            # The content goes as the payload, encoded once: the parent hands the text to the agent
            # and parses it only if someone reads ToolResult.content.
            kind = req.get("kind", "write")
            res, text = self.run_tool(req["name"], req["args"], kind)
            if not res["ok"]:
                return res, b""
            if req.get("image") and kind == "write":  # the state after the write, in the same reply
                return {"ok": True, "text": len(text)}, text + bytes(self.conn.serialize())
            return _OK, text
        if op == "batch":
            return {"ok": True, "results": [self.run_tool(n, a, k)[0] for n, a, k in req["calls"]]}, b""
        if op == "episodes":
            return self.run_episodes(req["episodes"], bool(req.get("images")))
        if op == "many":
            return self.run_many(req["calls"])
        if op == "reset":
            if self.conn.in_transaction:
                self.conn.rollback()
            self.guard.load(payload or self.seed)
            return {"ok": True}, b""
        if op == "snapshot":
            if self.conn.in_transaction:
                self.conn.rollback()
            return {"ok": True}, bytes(self.conn.serialize())
        if op == "info":
            return {"ok": True, "load_error": self.load_error,
                    "missing": [t.name for t in self.spec.tools if t.name not in self.tools]}, b""
        if op == "ping":
            return {"ok": True}, b""
        return {"ok": False, "error": f"unknown op {op!r}"}, b""

    def move_to(self, cpu: Any) -> None:
        """Run on the caller's CPU from now on (cpu="caller"); one this process may not use (a
        cpuset of its own) leaves it where it is, and the next request does not try again."""
        self.on_cpu = cpu
        try:
            os.sched_setaffinity(0, (cpu,))
        except (OSError, TypeError, ValueError, OverflowError):
            pass

    def serve(self) -> None:
        while True:
            got = self.recv()
            if got is None:
                return
            body, payload, nonce = got
            fallback = "reply"
            try:
                req = _loads(body)
                cpu = req.get("cpu")
                if cpu is not None and cpu != self.on_cpu:
                    self.move_to(cpu)
                if req.get("op") == "call":
                    fallback = f"tool {req.get('name')}"
                reply, out = self.handle(req, payload)
            except MemoryError:
                reply, out = {"ok": False, "error": f"{fallback} failed: out of memory", "oom": True}, b""
            except BaseException as exc:  # noqa: BLE001 - a bad request never kills the worker
                reply, out = {"ok": False, "error": f"{fallback} failed: worker error: {type(exc).__name__}: {exc}"}, b""
            self.send(reply, out, nonce, fallback)


# The zygote -------------------------------------------------------------------------------------
def _status(st: int) -> dict[str, int]:
    if os.WIFSIGNALED(st):
        return {"signal": os.WTERMSIG(st)}
    return {"exit": os.WEXITSTATUS(st)} if os.WIFEXITED(st) else {}


class Zygote:
    """Forks the children; never runs tool code. One child is active, one spare is forked ahead
    (unless `ahead` is off: then each is forked when asked for)."""

    def __init__(self, worker: Worker, ctl: socket.socket, scratch_writable: bool, scratch: str, use_seccomp: bool,
                 ahead: bool = True):
        self.worker = worker
        self.ahead = ahead  # fork the next spare as soon as one is handed out (off the caller's path)
        self.ctl = ctl
        self.scratch_writable = scratch_writable
        self.scratch = scratch
        self.pid = os.getpid()
        self.active: int | None = None
        self.spare: dict[str, Any] | None = None
        self.dying: list[int] = []  # killed, not yet reaped
        self.filter = child_seccomp() if use_seccomp else None

    def fork_child(self, first: bool = False) -> dict[str, Any]:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        go_r, go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nothing here returns
            code = 0
            try:
                for fd in (req_w, rep_r, go_w, ready_r, self.ctl.fileno()):
                    os.close(fd)
                if self.spare is not None:
                    for fd in (self.spare["req_w"], self.spare["rep_r"], self.spare["go_w"], self.spare["ready_r"]):
                        os.close(fd)
                set_parent_death_signal()
                if os.getppid() != self.pid:
                    os._exit(70)
                if self.filter is not None:
                    self.filter.load()
                report = {"child_seccomp": self.filter is not None, **probe()} if first else {}
                os.write(ready_w, _dumps(report).encode() + b"\n")  # the first report: before any tool code
                os.close(ready_w)
                w = self.worker
                w.warm()  # off the caller's path; trusted code only: tool code runs after `go`
                if os.read(go_r, 1) != b"g":
                    os._exit(0)
                os.close(go_r)
                w.load_tools()  # one process at a time runs tool code: the active child
                w.attach(req_r, rep_w)
                w.serve()
            except BaseException:  # noqa: BLE001 - stderr is /dev/null: the exit status says it
                code = 71
            os._exit(code)
        for fd in (req_r, rep_w, go_r, ready_w):
            os.close(fd)
        return {"pid": pid, "req_w": req_w, "rep_r": rep_r, "go_w": go_w, "ready_r": ready_r}

    def wait_ready(self, spare: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any] | None:
        """The spare's report line, or None if it died or hung."""
        p = select.poll()
        p.register(spare["ready_r"], select.POLLIN)
        buf = b""
        while not buf.endswith(b"\n"):
            if not p.poll(timeout_s * 1000):
                return None
            chunk = os.read(spare["ready_r"], 65536)
            if not chunk:
                return None
            buf += chunk
        return _loads(buf)

    def discard(self, child: dict[str, Any]) -> None:
        for fd in ("req_w", "rep_r", "go_w", "ready_r"):
            try:
                os.close(child[fd])
            except OSError:
                pass
        try:
            os.kill(child["pid"], signal.SIGKILL)
            os.waitpid(child["pid"], 0)
        except OSError:
            pass

    def next(self, reap: bool) -> tuple[dict[str, Any], list[int]]:
        """Kill the active child, empty scratch, activate the spare: (reply, the spare's pipe ends).

        reap: wait for the killed child (it may have been running: a hung or crashed call) and
        report how it ended. Without it (a reset: the child is idle in its read, so it runs no tool
        code) it is reaped later and its exit is not waited for."""
        reply: dict[str, Any] = {"ok": True}
        if self.active is not None:
            try:
                os.kill(self.active, signal.SIGKILL)
            except OSError:
                pass
            if reap:
                _, st = os.waitpid(self.active, 0)
                reply["previous"] = _status(st)
            else:
                self.dying.append(self.active)
            self.active = None
        for pid in list(self.dying):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.dying.remove(pid)
            except ChildProcessError:
                self.dying.remove(pid)
        if self.scratch_writable:
            wipe(self.scratch)
        for _ in range(2):
            spare, self.spare = self.spare or self.fork_child(), None
            try:
                if self.wait_ready(spare) is not None and os.write(spare["go_w"], b"g") == 1:
                    break
            except OSError:  # it died on the way
                pass
            self.discard(spare)
        else:
            return {"ok": False, "error": "could not start a sandbox child"}, []
        os.close(spare["go_w"])
        os.close(spare["ready_r"])
        self.active = spare["pid"]
        return reply, [spare["req_w"], spare["rep_r"]]

    def serve(self) -> None:
        buf = b""
        while True:
            while len(buf) < HEADER.size or len(buf) < HEADER.size + HEADER.unpack_from(buf)[0]:
                chunk = self.ctl.recv(65536)
                if not chunk:
                    return
                buf += chunk
            n, _, nonce = HEADER.unpack_from(buf)
            req = _loads(buf[HEADER.size:HEADER.size + n])
            buf = buf[HEADER.size + n:]
            fds: list[int] = []
            if req.get("op") == "next":
                reply, fds = self.next(bool(req.get("reap")))
            else:
                reply = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
            body = _dumps(reply).encode("utf-8", "surrogatepass")
            frame = HEADER.pack(len(body), 0, nonce) + body
            if fds:
                socket.send_fds(self.ctl, [frame], fds)
            else:
                self.ctl.sendall(frame)
            for fd in fds:
                os.close(fd)
            if fds and self.ahead:
                self.spare = self.fork_child()  # forked ahead, off the caller's critical path

    def shutdown(self) -> None:
        for child in ([self.spare] if self.spare else []):
            self.discard(child)
        if self.active is not None:
            try:
                os.kill(self.active, signal.SIGKILL)
                os.waitpid(self.active, 0)
            except OSError:
                pass


def _import_pyseccomp(libraries: dict[str, str]) -> None:
    """Import pyseccomp with the library names the parent already found (envs.sandbox): its
    find_library calls would otherwise run ldconfig twice in every worker's start. pyseccomp uses
    ctypes.util for find_library alone, at import; when the parent found both libraries a stand-in
    module answers instead, for the import only (the real ctypes.util imports shutil with its
    compression modules, subprocess and tempfile: a tenth of a worker's start)."""
    import ctypes

    if libraries.get("c") and libraries.get("seccomp") and "ctypes.util" not in sys.modules:
        stand_in = type(sys)("ctypes.util")
        stand_in.find_library = libraries.get  # type: ignore[attr-defined]
        sys.modules["ctypes.util"], ctypes.util = stand_in, stand_in  # type: ignore[attr-defined]
        try:
            import pyseccomp  # noqa: F401
        finally:
            del sys.modules["ctypes.util"], ctypes.util  # a later `import ctypes.util` loads the real one
        return
    import ctypes.util

    real = ctypes.util.find_library
    ctypes.util.find_library = lambda name: libraries.get(name) or real(name)
    try:
        import pyseccomp  # noqa: F401
    finally:
        ctypes.util.find_library = real


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", type=int, required=True)
    ap.add_argument("--domain", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--scratch-writable", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--max-reply", type=int, default=4 << 20)
    ap.add_argument("--spin-us", type=int, default=0)
    ap.add_argument("--limits", default="{}")
    ap.add_argument("--seccomp", type=int, default=1)
    ap.add_argument("--landlock", type=int, default=1)
    ap.add_argument("--lib", default="")
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--libraries", default="{}")
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--ahead", type=int, default=1, help="0: fork each child when asked, none ahead")
    a = ap.parse_args(argv)
    if a.cpu is not None:  # before any fork: the children run there too (envs.sandbox: cpu)
        os.sched_setaffinity(0, {a.cpu})
    set_parent_death_signal()
    if a.parent_pid and os.getppid() != a.parent_pid:
        return  # the caller is already gone
    os.chdir(a.scratch)
    signal.signal(signal.SIGALRM, _alarm)
    ctl = socket.socket(fileno=a.ctl)
    ctl.setblocking(True)
    scratch = a.scratch if a.scratch_writable else None
    w = Worker(a.domain, a.time_limit, a.max_reply, a.spin_us, scratch)
    wanted = named(w.code) if w.code is not None else set()
    for name in PRELOAD:
        if name not in wanted:
            continue
        try:
            __import__(name)
        except ImportError:
            pass
    layers: dict[str, Any] = {"rlimits": set_rlimits(json.loads(a.limits))}
    devnull = os.open(os.devnull, os.O_RDWR)
    if a.seccomp:
        try:  # import before Landlock: finding libseccomp runs ldconfig and opens /dev/null
            _import_pyseccomp(json.loads(a.libraries))
        except Exception:  # noqa: BLE001 - reported as a missing layer below
            pass
    if a.landlock:
        prefix = os.path.realpath(sys.base_prefix)
        reads = [prefix, "/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", a.lib, *w.files,
                 os.path.dirname(os.path.realpath(sys.executable))]
        try:
            writes = ([a.scratch] if a.scratch_writable else []) + ["/dev/null", "/dev/zero"]
            layers["landlock"] = install_landlock(reads + ["/dev/urandom", a.scratch], writes)
        except Exception:  # noqa: BLE001 - reported as a missing layer
            layers["landlock"] = False
    else:
        layers["landlock"] = False
    layers["seccomp"], fixed = install_seccomp() if a.seccomp else (False, False)
    w.hygiene = not fixed
    # From here on nothing reaches the parent except over the private socket and pipes.
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    z = Zygote(w, ctl, bool(a.scratch_writable), a.scratch, bool(layers["seccomp"]), bool(a.ahead))
    try:
        z.spare = z.fork_child(first=True)
        report = z.wait_ready(z.spare) or {}
        layers.update(report)
        layers["seccomp"] = bool(layers["seccomp"] and report.get("child_seccomp"))
        body = _dumps({"ok": True, "layers": layers}).encode()
        ctl.sendall(HEADER.pack(len(body), 0, NO_NONCE) + body)
        z.serve()
    finally:
        z.shutdown()


if __name__ == "__main__":
    main()
