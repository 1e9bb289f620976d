"""Parent side of the sandbox: start the worker (bubblewrap + seccomp + rlimits), talk to it over
private pipes, enforce a wall-clock deadline and size caps on every read and write, and replace a
child that misbehaves.

Layers (reported as `WorkerProcess.isolation`, a dict of layer -> bool):
  uid         - the worker runs as uid 65534 in its own user namespace (bwrap --unshare-user)
  network     - no network: own network namespace (bwrap --unshare-net) and socket() denied
  filesystem  - only the interpreter, the envs package (a copy with its bytecode: `worker_lib`) and
                the domain's tools/spec/seed, read-only;
                the one writable mount is a size-limited scratch tmpfs (also /tmp); /etc, /work,
                /root... are not there (bwrap's mount namespace, or Landlock over private copies
                where bwrap is unusable: then nothing is writable)
  pid         - own pid namespace: the parent and other processes are invisible
  seccomp     - socket/connect/exec/fork/clone/kill/ptrace/mount/setrlimit... fail with EPERM;
                no signal to any process (a child may not signal itself either)
  rlimits     - RLIMIT_AS (the memory budget less the scratch size), NOFILE, NPROC, FSIZE, CPU, CORE
  environment - the worker's environment holds only PATH, LANG, LC_ALL, HOME, TMPDIR: no secret of
                the caller (API keys, tokens) reaches tool code
  landlock    - where the kernel has it: reads only of the interpreter, the envs package and the
                domain copy, writes only to scratch, no TCP, signals scoped (also without bwrap)
Without uid/network/filesystem/seccomp/rlimits/environment the runtime refuses to start unless
`unsafe=True` or AGENTSCALER_UNSAFE_SANDBOX=1.

Processes (envs.worker): a zygote that never runs tool code forks one child per episode (see
`fresh`); the parent talks to the zygote over a unix socket and to the current child over its own
pipe pair. Every request carries a random nonce the reply must echo (envs.pipe), so a frame that
tool code writes itself is rejected. The isolation report comes from the zygote before any tool
code is loaded.

Shared launcher (envs.launcher; `shared_launcher`, used by a rules build's batches): where the kernel
has Landlock ABI 6+, the workers a process opens one after another for domains under given folders
are forks of one launcher already inside a bubblewrap with its imports done, instead of a bubblewrap
and an interpreter each; the layers above are the same, Landlock then also keeping each domain to
its own files, scratch folder and processes. Such a worker does not busy-wait unless given spin_us
(its caller computes between calls) and forks each child when asked, none ahead (a build process
keeps both CPUs busy: a child forked ahead saves it no wall time, and each domain's last would never
run). AGENTSCALER_SHARED_SANDBOX=0 turns it off.

Transport: caller and worker each busy-wait up to `spin_us` (default 200 us) for the other's next
message before sleeping on the pipe. On these VMs a sleeping process takes 25-75 us to wake, more
than most tool calls; within the spin a round trip is ~3 us. AGENTSCALER_SPIN_US=0 turns it off.
Without spinning, `cpu=k` keeps the worker on CPU k, and a call from a thread on CPU k hands the
CPU over: the worker, woken there, takes it at once, and hands it back with the reply before the
caller has slept (~2 us instead of waking a halted CPU, ~50 us; no CPU burns while either side
waits). The caller's thread stays free. Left to the scheduler, a sleeping caller is woken on an idle
CPU if there is one, so the first call from elsewhere (or after the scheduler moved the thread)
holds the thread on CPU k for its round trip (two affinity changes, ~10 us); it is then on CPU k and
the next calls need nothing. `cpu="caller"`: k is the CPU the caller is on at its first call, and
each request names it, for the worker's child (a new one after every reset) to move there.
Neither busy-waits: spinning on the caller's CPU would only take it from the caller.
"""

from __future__ import annotations

import ctypes.util
import fcntl
import hashlib
import importlib.util
import json
import os
import py_compile
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from agentscaler.settings import cache_root
from envs.pipe import HEADER, NO_NONCE, OK_BODY, spin_readinto
from envs.worker import landlock_abi

REPO = Path(__file__).resolve().parent.parent
REQUIRED_LAYERS = ("uid", "network", "filesystem", "seccomp", "rlimits", "environment")
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
CTL_TIMEOUT = 60.0  # the zygote answers within milliseconds; this bounds a hung one
READ_CHUNK = 1 << 16
# The reply pipe's capacity (Linux default 64 kB): a replay's reply carries many database images,
# and each pipeful costs both sides a sleep and a wake-up. Pages are taken only while data waits.
REPLY_PIPE_BYTES = 1 << 20
SCRATCH_PREFIX = "agentscaler-worker-"  # + the owner's pid + "-": a dead owner's folder can be found


def encode_request(obj: dict[str, Any]) -> bytes:
    """A request's JSON body: orjson (0.1 us for a call's request, the stdlib 2 us); the stdlib for
    what orjson refuses (integers past 64 bits, lone surrogates, non-string keys), which the worker
    reads back the same. Raises TypeError/ValueError/RecursionError for what neither can encode."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return _dumps(obj).encode("utf-8", "surrogatepass")


_LONG_DIGITS = re.compile(rb"\d{19}")  # an integer orjson may read as a float (it does below -2**63)


def decode_reply(data: bytes) -> Any:
    """A reply's JSON (a frame body, a tool's content): orjson (3-10x the stdlib on these); the
    stdlib for what orjson refuses (NaN, lone surrogates, not JSON), which reads it or raises
    ValueError as before, and for any text with a run of 19 digits (orjson reads an integer past
    64 bits as a float, where the stdlib keeps it exact)."""
    if _LONG_DIGITS.search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


@lru_cache(maxsize=1)
def _sweep_orphan_scratch() -> int:
    """Remove scratch folders whose owner died without `stop()` (SIGKILL, OOM kill, os._exit).

    Once per process, before its first worker. A folder is removed only when its name carries a pid
    that no longer runs and it belongs to this uid; a live pid (even a reused one) keeps its folder.
    Returns how many were removed.
    """
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or path.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        except OSError:
            continue  # gone meanwhile, or a live process of another user
    return removed


class SandboxError(RuntimeError):
    """The sandbox cannot start (missing isolation, broken domain files)."""


class WorkerCrashed(Exception):
    """The worker died, hung or sent garbage; it has been replaced. The message is for the caller."""


class RequestTooLarge(ValueError):
    """A request over its operation's size cap; nothing was sent."""


def unsafe_from_env() -> bool:
    return os.environ.get("AGENTSCALER_UNSAFE_SANDBOX", "").strip().lower() in ("1", "true", "yes")


def _pyseccomp_path() -> Path | None:
    try:
        import pyseccomp  # noqa: F401
    except Exception:  # noqa: BLE001
        return None
    return Path(sys.modules["pyseccomp"].__file__).resolve()


def worker_lib(seccomp_py: Path | None) -> Path:
    """A folder to mount as the worker's library (envs, without tau2, and pyseccomp.py) holding the
    modules' bytecode too, compiled once per content: the worker runs with -B and reads only, so
    where the source tree has no __pycache__ (PYTHONDONTWRITEBYTECODE, a read-only install) every
    worker's start compiled envs.worker and its imports again (about 20 ms of its CPU). In the
    per-user cache, named by a hash of the sources and the interpreter; built in a folder of its own
    and renamed into place, so a reader never sees half of one."""
    files = sorted(p for p in (REPO / "envs").rglob("*.py") if "tau2" not in p.relative_to(REPO).parts
                   and "__pycache__" not in p.parts)
    return _worker_lib(tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files),
                       str(seccomp_py) if seccomp_py else None, cache_root())


@lru_cache(maxsize=8)
def _worker_lib(files: tuple[tuple[str, int, int], ...], seccomp_py: str | None, cache: Path) -> Path:
    h = hashlib.sha256(f"{sys.version}\0{sys.executable}".encode())
    for path in [f[0] for f in files] + ([seccomp_py] if seccomp_py else []):
        h.update(b"\0" + str(Path(path).relative_to(REPO) if path.startswith(str(REPO)) else Path(path).name).encode())
        h.update(b"\0" + Path(path).read_bytes())
    root = cache / "worker-lib"
    dest = root / h.hexdigest()[:24]
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide it from a worker running as another uid
        for path, _, _ in files:
            target = tmp / Path(path).relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        if seccomp_py:
            shutil.copyfile(seccomp_py, tmp / "pyseccomp.py")
        for src in tmp.rglob("*.py"):
            py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        os.rename(tmp, dest)
    except OSError:
        if not dest.is_dir():  # not built by another process meanwhile: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@lru_cache(maxsize=1)
def _library_names() -> dict[str, str]:
    """What ctypes.util.find_library answers for the libraries pyseccomp loads, found once here:
    each answer runs ldconfig (80-170 ms of a worker's start), and every worker would ask again."""
    found = {name: ctypes.util.find_library(name) for name in ("c", "seccomp")}
    return {k: v for k, v in found.items() if v}


@lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """True when bubblewrap can create user+net+pid namespaces here (checked once per process)."""
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        r = subprocess.run([exe, "--unshare-user", "--uid", "65534", "--gid", "65534", "--unshare-net",
                            "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "true"],
                           capture_output=True, timeout=10, env=worker_env("/"))
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def worker_env(scratch: str) -> dict[str, str]:
    """The whole environment of the worker: nothing inherited from the caller."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": scratch, "TMPDIR": scratch}


def _root_binds() -> list[str]:
    args: list[str] = []
    for top in ("usr", "bin", "lib", "lib64", "lib32", "sbin"):
        p = Path("/") / top
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for f in ("/etc/ld.so.cache", "/etc/localtime"):
        if Path(f).exists():
            args += ["--ro-bind", f, f]
    prefix = Path(sys.base_prefix).resolve()
    if not str(prefix).startswith("/usr/"):
        args += ["--ro-bind", str(prefix), str(prefix)]
    return args


def _bwrap_command(scratch: str, seccomp_py: Path | None, lib: str) -> list[str]:
    """bubblewrap's namespaces, clean environment, read-only system folders and the worker library
    (at `lib`): the start of every sandbox's command line (a domain's own, the shared launcher's)."""
    cmd = [shutil.which("bwrap"), "--unshare-user", "--uid", "65534", "--gid", "65534", "--unshare-net",
           "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
           "--new-session", "--hostname", "sandbox", "--clearenv"]
    for k, v in worker_env(scratch).items():
        cmd += ["--setenv", k, v]
    return cmd + [*_root_binds(), "--ro-bind", str(worker_lib(seccomp_py)), lib]


def log_tail(log: Any) -> str:
    """The last 3,000 bytes of a sandbox's log file (stdout and stderr until its confinement), or ""."""
    if log is None:
        return ""
    try:
        log.seek(0)
        return log.read()[-3000:].decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


_sched_getcpu = ctypes.CDLL(None).sched_getcpu  # the CPU this thread is on (glibc, through the vDSO)


def default_spin_us() -> int:
    """How long each side busy-waits for the other before sleeping (AGENTSCALER_SPIN_US; default
    200 us, 0 on a single CPU where spinning only delays the other side)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return 0
    raw = os.environ.get("AGENTSCALER_SPIN_US", "200")
    try:
        return max(0, int(raw))
    except ValueError:
        raise ValueError(f"AGENTSCALER_SPIN_US must be a whole number of microseconds, got {raw!r}") from None


# Operations that run tool code (the child is tainted after one).
TOOL_OPS = ("call", "batch", "episodes", "many")
# What WorkerProcess.send returns and finish takes: (nonce, deadline, reply payload cap).
Pending = tuple[bytes, float, int]

# RLIMIT_CPU is a lifetime backstop only (calls are policed by the per-call deadline): a day.
DEFAULT_LIMITS = {"as": 1 << 30, "nofile": 64, "nproc": 64, "fsize": 16 << 20, "cpu": 86400, "core": 0}


class WorkerProcess:
    """One sandboxed worker for one domain directory. Not thread-safe: one call at a time.

    Memory budget: `memory_mb` per process, of which `scratch_mb` is the scratch tmpfs (tmpfs pages
    are not counted by RLIMIT_AS, so the address-space limit is what is left). Size caps: a call's
    arguments and reply (`max_reply`), a snapshot or restore (the whole budget)."""

    def __init__(self, domain_dir: Path, *, unsafe: bool = False, time_limit: float = 2.0,
                 max_reply: int = 4 << 20, memory_mb: int = 1024, scratch_mb: int = 32,
                 use_bwrap: bool | None = None, landlock: bool = True, spin_us: int | None = None,
                 cpu: int | str | None = None):
        self.domain_dir = Path(domain_dir).resolve()
        self.unsafe = unsafe or unsafe_from_env()
        self.time_limit = time_limit
        self.grace = 1.0 + time_limit * 0.5
        self.max_reply = max_reply
        self.scratch_mb = max(1, min(scratch_mb, memory_mb // 4))
        self.limits = dict(DEFAULT_LIMITS, **{"as": (memory_mb - self.scratch_mb) << 20})
        self.max_state = memory_mb << 20
        self.use_bwrap = bwrap_works() if use_bwrap is None else use_bwrap
        self.landlock = landlock
        if cpu == "caller":  # the Transport note
            if spin_us:
                raise ValueError(f'cpu="caller" runs the worker on the caller\'s CPU, where it must not busy-wait '
                                 f"(spin_us {spin_us}, not 0)")
            spin_us = 0
        elif cpu is not None and cpu not in os.sched_getaffinity(0):
            raise ValueError(f"cpu {cpu} is not one this process may run on: {sorted(os.sched_getaffinity(0))}")
        self.spin_ns = (default_spin_us() if spin_us is None else spin_us) * 1000
        self._spin_given = spin_us is not None
        self.cpu = cpu
        self._home: int | None = cpu if isinstance(cpu, int) else None  # the worker's CPU (cpu="caller": once known)
        self.proc: subprocess.Popen | None = None
        self.isolation: dict[str, bool] = {}
        self.load_error: str | None = None
        self.missing: list[str] = []
        self.restarts = 0
        self.tainted = False  # tool code has run in the current child (a call or a batch)
        self._ctl: socket.socket | None = None
        self._rfd = self._wfd = -1
        self._poll = self._wpoll = None
        self._rbuf = bytearray(READ_CHUNK)
        self._nonces, self._nonce_at = b"", 0  # drawn 256 at a time (_nonce)
        self._scratch: str | None = None
        self._log: Any = None
        self._launcher: Launcher | None = None

    # start / stop -------------------------------------------------------------------------------
    def _command(self, ctl: int, scratch: str) -> list[str]:
        seccomp_py = _pyseccomp_path()
        exe = str(Path(sys.executable).resolve())
        spec = json.loads((self.domain_dir / "spec.json").read_text("utf-8"))
        if self.use_bwrap:
            lib, dom, scr = "/sandbox/lib", "/sandbox/domain", "/scratch"
        else:
            # No mount namespace: the worker gets copies of what it needs (Landlock then limits
            # reads to them and the interpreter, and writes to nothing).
            lib, dom, scr = str(Path(scratch) / "lib"), str(Path(scratch) / "domain"), scratch
            os.makedirs(lib, exist_ok=True)
            os.makedirs(dom, exist_ok=True)
            if seccomp_py:
                shutil.copy(seccomp_py, Path(lib) / "pyseccomp.py")
            shutil.copytree(REPO / "envs", Path(lib) / "envs", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "tau2"))
            shutil.copy(self.domain_dir / "spec.json", Path(dom) / "spec.json")
            for key, default in (("code_path", "tools.py"), ("seed_path", "seed.sqlite")):
                rel = spec.get(key, default)
                (Path(dom) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(self.domain_dir / rel, Path(dom) / rel)
        boot = f"import sys; sys.path[:0] = [{lib!r}]; from envs.worker import main; main()"
        worker = [exe, "-I", "-S", "-B", "-c", boot, "--ctl", str(ctl), "--domain", dom, "--scratch", scr,
                  "--scratch-writable", "1" if self.use_bwrap else "0", *self._worker_args(lib, seccomp_py),
                  "--parent-pid", "0" if self.use_bwrap else str(os.getpid())]
        if not self.use_bwrap:
            return worker
        d = self.domain_dir
        cmd = _bwrap_command(scr, seccomp_py, lib)
        for key, default in (("code_path", "tools.py"), ("seed_path", "seed.sqlite")):
            rel = spec.get(key, default)
            src = d / rel
            if src.exists():
                cmd += ["--ro-bind", str(src), f"{dom}/{rel}"]
        # One writable mount, size-limited; bwrap's own root and /dev tmpfs become read-only.
        cmd += ["--ro-bind", str(d / "spec.json"), f"{dom}/spec.json", "--proc", "/proc", "--dev", "/dev",
                "--size", str(self.scratch_mb << 20), "--tmpfs", scr, "--symlink", scr, "/tmp",
                "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", scr]
        return cmd + ["--"] + worker

    def _worker_args(self, lib: str, seccomp_py: Path | None) -> list[str]:
        """envs.worker's arguments but for where it runs (--ctl, --domain, --scratch...)."""
        args = ["--time-limit", repr(self.time_limit), "--max-reply", str(self.max_reply),
                "--spin-us", str(self.spin_ns // 1000), "--limits", json.dumps(self.limits),
                "--seccomp", "1" if seccomp_py else "0", "--landlock", "1" if self.landlock else "0", "--lib", lib,
                "--libraries", json.dumps(_library_names() if seccomp_py else {})]
        return args + (["--cpu", str(self.cpu)] if isinstance(self.cpu, int) else [])

    def start(self) -> dict[str, bool]:
        self.stop()
        try:
            spec = json.loads((self.domain_dir / "spec.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise SandboxError(f"{self.domain_dir}: cannot read spec.json: {exc}") from None
        for key, default in (("code_path", "tools.py"), ("seed_path", "seed.sqlite")):
            if not (self.domain_dir / spec.get(key, default)).is_file():
                raise SandboxError(f"{self.domain_dir}: {spec.get(key, default)} is missing")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        launcher = _LAUNCHER if self.use_bwrap and self.landlock else None
        dom = launcher.inside(self.domain_dir) if launcher is not None and launcher.failed is None else None
        self._launcher = None
        try:
            if launcher is not None and dom is not None:  # a fork of the shared launcher's interpreter
                spin_ns = self.spin_ns
                if not self._spin_given:
                    # a process opening domain after domain computes between calls: on a CPU-bound
                    # machine a busy-waiting worker only takes the CPU from the build's other processes
                    self.spin_ns = 0
                # no child forked ahead either: a build's last spare of each domain would never run
                argv = ["--domain", dom, "--ahead", "0", *self._worker_args(LAUNCHER_LIB, _pyseccomp_path())]
                try:
                    self.proc = launcher.open(argv, theirs.fileno())
                    self._launcher = launcher
                except SandboxError as exc:  # no shared launcher here after all: a sandbox of its own
                    launcher.failed, self.spin_ns = str(exc), spin_ns
            if self._launcher is None:
                _sweep_orphan_scratch()
                self._scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
                self._log = tempfile.TemporaryFile(prefix="agentscaler-worker-log-")
                self.proc = subprocess.Popen(self._command(theirs.fileno(), self._scratch),
                                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                             stdout=self._log, stderr=self._log, start_new_session=True,
                                             close_fds=True, env=worker_env(self._scratch))
        finally:
            theirs.close()
        ours.setblocking(False)
        self._ctl = ours
        try:
            deadline = time.monotonic() + 30.0 + self.time_limit * 2
            hello, _ = self._ctl_request(None, deadline)
            probe = hello.get("layers", {})
            self.isolation = {
                "uid": bool(self.use_bwrap and probe.get("uid") == 65534) or (os.getuid() != 0 and probe.get("uid") != os.getuid()),
                "network": bool(self.use_bwrap) or bool(probe.get("socket_blocked")),
                "filesystem": bool(probe.get("fs_hidden")) and bool(self.use_bwrap or probe.get("landlock")),
                "pid": bool(self.use_bwrap),
                "seccomp": bool(probe.get("seccomp")) and bool(probe.get("socket_blocked")) and bool(probe.get("fork_blocked")),
                "rlimits": bool(probe.get("rlimits")),
                "environment": bool(probe.get("secrets_hidden")),
                "landlock": bool(probe.get("landlock")),
            }
            missing_layers = [k for k in REQUIRED_LAYERS if not self.isolation[k]]
            if missing_layers and not self.unsafe:
                self.stop()
                raise SandboxError(
                    f"refusing to run generated code without isolation layers {missing_layers} "
                    f"(bwrap usable: {self.use_bwrap}); pass unsafe=True or set AGENTSCALER_UNSAFE_SANDBOX=1")
            self._activate(deadline)
            info, _ = self._roundtrip({"op": "info"}, b"", max(1.0, deadline - time.monotonic()))
        except (WorkerCrashed, OSError) as exc:
            log = self._read_log()
            self.stop()
            raise SandboxError(f"sandbox worker for {self.domain_dir} failed to start: {exc}\n{log}") from None
        self.load_error = info.get("load_error")
        self.missing = list(info.get("missing", []))
        return self.isolation

    def _read_log(self) -> str:
        return log_tail(self._launcher._log if self._launcher is not None else self._log)

    def _close_child(self) -> None:
        for fd in (self._rfd, self._wfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rfd = self._wfd = -1

    def kill(self) -> None:
        if self.proc is not None:
            try:
                if isinstance(self.proc, subprocess.Popen):  # a Hosted zygote's pid is the launcher's
                    os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        self._close_child()
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None

    def stop(self) -> None:
        self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # children -----------------------------------------------------------------------------------
    def _activate(self, deadline: float, reap: bool = True) -> dict[str, int] | None:
        """Ask the zygote for the next child (it kills the current one and empties scratch); adopt
        its pipes. With reap, returns how the previous child ended ({"signal": n} / {"exit": n})."""
        self._close_child()
        reply, fds = self._ctl_request({"op": "next", "reap": reap}, deadline)
        if reply.get("ok") is not True or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise WorkerCrashed(f"zygote failed: {reply.get('error') or 'no child'}")
        self._wfd, self._rfd = fds
        try:
            fcntl.fcntl(self._rfd, fcntl.F_SETPIPE_SZ, REPLY_PIPE_BYTES)
        except OSError:  # over /proc/sys/fs/pipe-max-size or the user's pipe budget: the default then
            pass
        os.set_blocking(self._wfd, False)
        os.set_blocking(self._rfd, False)
        self._poll = select.poll()
        self._poll.register(self._rfd, select.POLLIN)
        self._wpoll = select.poll()
        self._wpoll.register(self._wfd, select.POLLOUT)
        self.tainted = False
        return reply.get("previous")

    def fresh(self, reap: bool = False) -> dict[str, int] | None:
        """A new child (a pristine copy of the zygote, seed loaded) for the next episode; a full
        restart if the zygote does not answer. reap: the current child may be running (it hung or
        crashed): wait for it, and return how it ended."""
        if self.proc is None:
            raise WorkerCrashed("not running")
        try:
            return self._activate(time.monotonic() + CTL_TIMEOUT, reap)
        except (WorkerCrashed, OSError):
            try:
                self.start()
            except SandboxError as exc:
                self.kill()
                raise WorkerCrashed(f"could not be restarted: {exc}") from None
            return None

    # transport ----------------------------------------------------------------------------------
    def _ctl_request(self, obj: dict[str, Any] | None, deadline: float) -> tuple[dict[str, Any], list[int]]:
        """One exchange with the zygote (obj None: read its start-up report). Bounded in time and size."""
        sock = self._ctl
        if sock is None:
            raise WorkerCrashed("not running")
        nonce = NO_NONCE
        if obj is not None:
            nonce = os.urandom(16)
            body = _dumps(obj).encode()
            view = memoryview(HEADER.pack(len(body), 0, nonce) + body)
            while view:
                try:
                    view = view[sock.send(view):]
                except BlockingIOError:
                    self._wait(sock, select.POLLOUT, deadline)
        buf, fds = b"", []
        spin_end = time.perf_counter_ns() + self.spin_ns  # as on the pipes: waking up costs more
        try:
            while len(buf) < HEADER.size or len(buf) < HEADER.size + HEADER.unpack_from(buf)[0]:
                try:
                    msg, got, _, _ = socket.recv_fds(sock, READ_CHUNK, 2)
                except BlockingIOError:
                    if time.perf_counter_ns() > spin_end:
                        self._wait(sock, select.POLLIN, deadline)
                    continue
                fds += got
                if not msg:
                    raise WorkerCrashed("exited")
                buf += msg
                if len(buf) > READ_CHUNK:
                    raise WorkerCrashed("broke the worker protocol (zygote reply too large) and was stopped")
            n, m, echo = HEADER.unpack_from(buf)
            if echo != nonce or m or len(buf) != HEADER.size + n:
                raise WorkerCrashed("broke the worker protocol (zygote) and was stopped")
            reply = json.loads(buf[HEADER.size:])
            if not isinstance(reply, dict):
                raise WorkerCrashed("broke the worker protocol (zygote) and was stopped")
        except (WorkerCrashed, ValueError) as exc:
            for fd in fds:
                os.close(fd)
            raise WorkerCrashed(str(exc) if isinstance(exc, WorkerCrashed) else "malformed reply") from None
        return reply, fds

    @staticmethod
    def _wait(sock: socket.socket, event: int, deadline: float) -> None:
        left = deadline - time.monotonic()
        p = select.poll()
        p.register(sock, event)
        if left <= 0 or not p.poll(left * 1000.0):
            raise WorkerCrashed("timeout")

    def _fill(self, view: memoryview, got: int, need: int, limit: int, deadline: float) -> int:
        """Read into view[got:limit] until at least `need` bytes are there. Every read is checked
        against the deadline, also when data keeps coming (a worker that keeps the pipe full)."""
        rfd, spin = self._rfd, self.spin_ns
        while got < need:
            # Without busy-waiting, sleep first: a read now would only fail (the reply is not there
            # yet) at the price of an exception (~1 us a call).
            k = spin_readinto(rfd, view[got:limit], spin) if spin else None
            if k is None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._poll.poll(left * 1000.0):
                    raise WorkerCrashed("timeout")
                k = spin_readinto(rfd, view[got:limit], 0)
                if k is None:
                    continue
            if not k:
                raise WorkerCrashed("exited")
            got += k
            if got < need and time.monotonic() > deadline:
                raise WorkerCrashed("timeout")
        return got

    def _recv(self, nonce: bytes, deadline: float, max_payload: int) -> tuple[dict[str, Any], bytes]:
        # Strict request/response: read big chunks (one poll + one read for a normal reply) into a
        # preallocated buffer; a large reply is read once into a buffer of its announced size.
        buf = self._rbuf
        view = memoryview(buf)
        got = self._fill(view, 0, HEADER.size, len(buf), deadline)
        n, m, echo = HEADER.unpack_from(buf)
        if echo != nonce:
            raise WorkerCrashed("broke the worker protocol (a reply to no request of ours) and was stopped")
        if n > self.max_reply + 4096 or m > max_payload:
            raise WorkerCrashed(f"reply too large ({n} + {m} bytes) and was stopped")
        total = HEADER.size + n + m
        if got > total:
            raise WorkerCrashed("broke the worker protocol (wrote to its reply pipe) and was stopped")
        if total > len(buf):
            big = bytearray(total)
            big[:got] = view[:got]
            view = memoryview(big)
        if got < total:
            self._fill(view, got, total, total, deadline)
        body = bytes(view[HEADER.size:HEADER.size + n])
        try:
            obj = {"ok": True} if body == OK_BODY else decode_reply(body)
        except ValueError:
            raise WorkerCrashed("malformed reply") from None
        if not isinstance(obj, dict):
            raise WorkerCrashed("malformed reply")
        return obj, bytes(view[HEADER.size + n:total]) if m else b""

    def _send(self, data: bytes, deadline: float) -> None:
        """Non-blocking write, bounded by the deadline: a worker that stops reading cannot freeze us."""
        view = memoryview(data)
        wfd = self._wfd
        while view:
            try:
                view = view[os.write(wfd, view):]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not self._wpoll.poll(left * 1000.0):
                    raise WorkerCrashed("send timeout") from None

    def _caps(self, op: str, image: bool = False) -> tuple[int, int, int]:
        """(request body, request payload, reply payload) caps of one operation, in bytes (image: a
        call whose reply carries the database image after it)."""
        if op == "call":
            return self.max_reply + 65536, 0, self.max_reply + (self.max_state if image else 0)
        if op == "batch":
            return self.max_state, 0, 0
        if op == "reset":
            return 65536, self.max_state, 0
        if op == "snapshot":
            return 65536, 0, self.max_state
        if op in ("episodes", "many"):
            return self.max_state, 0, self.max_state
        return 65536, 0, 0

    def request(self, obj: dict[str, Any], payload: bytes = b"", timeout: float | None = None) -> tuple[dict, bytes]:
        """One round trip with the current child. Raises RequestTooLarge (nothing sent), TypeError/
        ValueError for unencodable requests, or WorkerCrashed after replacing a child that hung,
        crashed, forged a frame or broke a cap."""
        held = self._hold_at_home()
        try:
            return self.finish(self.send(obj, payload, timeout))
        finally:
            if held is not None:
                os.sched_setaffinity(0, held)

    def _hold_at_home(self) -> set[int] | None:
        """Without busy-waiting, a worker kept on one CPU (`cpu`, the Transport note): when this
        thread is on another CPU, hold it on the worker's for the round trip (it stays there after)
        and return the thread's own CPUs to give back; None when nothing changed."""
        if self.cpu is None or self.spin_ns:
            return None
        here = _sched_getcpu()
        if self._home is None:
            self._home = here
        if here == self._home:  # the usual case: the worker is woken here and takes over at once
            return None
        mask = os.sched_getaffinity(0)
        if self._home not in mask:  # this thread may not run there: a plain round trip
            return None
        os.sched_setaffinity(0, (self._home,))
        return mask

    def send(self, obj: dict[str, Any], payload: bytes = b"", timeout: float | None = None) -> Pending:
        """request()'s first half: send, and return what finish() needs to read the reply. Between
        the two the caller may send to other workers, so they all run at once (envs.hosted's
        vectorized step); the time limit runs from here. Raises as request() does."""
        try:
            return self._send_request(obj, payload, timeout)
        except WorkerCrashed as exc:
            raise self._replaced(str(exc)) from None

    def finish(self, pending: Pending) -> tuple[dict, bytes]:
        """request()'s second half: the reply to send()'s request (WorkerCrashed as in request())."""
        try:
            return self._receive(pending)
        except WorkerCrashed as exc:
            raise self._replaced(str(exc)) from None

    def _replaced(self, reason: str) -> WorkerCrashed:
        """The child hung, crashed or misbehaved: replace it; the error to raise says why."""
        self.restarts += 1
        previous = self.fresh(reap=True)
        return WorkerCrashed(self._explain(reason, previous))

    def _roundtrip(self, obj: dict[str, Any], payload: bytes, timeout: float | None) -> tuple[dict, bytes]:
        return self._receive(self._send_request(obj, payload, timeout))

    def _receive(self, pending: Pending) -> tuple[dict, bytes]:
        try:
            return self._recv(*pending)
        except OSError as exc:
            raise WorkerCrashed(f"pipe error {exc}") from None

    def _send_request(self, obj: dict[str, Any], payload: bytes, timeout: float | None) -> Pending:
        if self.proc is None or self._wfd < 0:
            raise WorkerCrashed("not running")
        if self.proc.poll() is not None:  # the sandbox is gone: a child it left may still answer for a moment
            raise WorkerCrashed("exited")
        op = obj.get("op", "")
        if self.cpu == "caller":
            obj = {**obj, "cpu": _sched_getcpu() if self._home is None else self._home}
        body = encode_request(obj)
        max_body, max_payload, max_reply_payload = self._caps(op, bool(obj.get("image")))
        if len(body) > max_body or len(payload) > max_payload:
            raise RequestTooLarge(f"{op} request too large ({len(body)} + {len(payload)} bytes > "
                                  f"{max_body} + {max_payload})")
        if op in TOOL_OPS:
            self.tainted = True
        nonce = self._nonce()
        deadline = time.monotonic() + (self.time_limit + self.grace if timeout is None else timeout)
        try:
            self._send(HEADER.pack(len(body), len(payload), nonce) + body + payload, deadline)
        except OSError as exc:  # EPIPE: the child is gone
            raise WorkerCrashed("exited" if isinstance(exc, BrokenPipeError) else f"pipe error {exc}") from None
        return nonce, deadline, max_reply_payload

    def _nonce(self) -> bytes:
        """A fresh random nonce for a request, from a pool drawn 256 at a time in this process (one
        getrandom() call instead of one per call; the child never sees one before its request)."""
        if self._nonce_at >= len(self._nonces):
            self._nonces, self._nonce_at = os.urandom(16 * 256), 0
        self._nonce_at += 16
        return self._nonces[self._nonce_at - 16:self._nonce_at]

    def _explain(self, reason: str, previous: dict[str, int] | None) -> str:
        if reason == "timeout":
            return f"exceeded the {self.time_limit:g} s time limit and was stopped"
        if reason == "send timeout":
            return f"did not take its request within the {self.time_limit:g} s time limit and was stopped"
        if reason == "exited":
            how = ""
            if previous and "signal" in previous:
                how = f" on signal {previous['signal']}"
            elif previous and "exit" in previous:
                how = f" with status {previous['exit']}"
            return f"crashed (the sandbox worker exited{how})"
        if reason == "malformed reply":
            return "broke the worker protocol (malformed reply) and was stopped"
        return reason

    def close(self) -> None:
        self.stop()


# A shared launcher (envs.launcher) -----------------------------------------------------------------
LAUNCHER_LIB = "/sandbox/lib"
LAUNCHER_MIN_ABI = 6  # Landlock scopes signals and abstract sockets from ABI 6: see envs.launcher


class Hosted:
    """A zygote forked by a Launcher, as WorkerProcess holds a process: polled and killed through a
    pidfd (its pid is one of the launcher's pid namespace; it is the launcher's child to reap)."""

    pid = None

    def __init__(self, pidfd: int):
        self.pidfd = pidfd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = -1  # exited (how is the launcher's to know)
        return self.returncode

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not select.select([self.pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("zygote", timeout or 0)
        self.returncode = -1
        os.close(self.pidfd)
        self.pidfd = -1
        return self.returncode

    def __del__(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)


class Launcher:
    """One bubblewrap for the domains under `roots` (bound read-only at /domains/<i>): each
    WorkerProcess started on one of them while this is the current launcher (`shared_launcher`) is a
    zygote forked by envs.launcher instead of a sandbox of its own. Not thread-safe."""

    def __init__(self, roots: list[Path], scratch_mb: int = 32):
        # scratch_mb: the one scratch tmpfs, shared by the workers it hosts (each writes only to a
        # folder of its own): at most a worker's own (WorkerProcess's default), so that a hosted
        # worker's memory stays within its budget (RLIMIT_AS is the budget less a worker's scratch)
        self.roots = [Path(r).resolve() for r in roots]
        self.scratch_mb = scratch_mb
        self.proc: subprocess.Popen | None = None
        self._ctl: socket.socket | None = None
        self._log: Any = None
        self.opened = 0
        self.failed: str | None = None  # why it could not start or answer: workers then get sandboxes of their own

    @staticmethod
    def available() -> bool:
        """bubblewrap works, pyseccomp imports and the kernel's Landlock is ABI 6+ (AGENTSCALER_SHARED_SANDBOX=0: off)."""
        if os.environ.get("AGENTSCALER_SHARED_SANDBOX", "1").strip() in ("0", "false", "no"):
            return False
        return landlock_abi() >= LAUNCHER_MIN_ABI and bwrap_works() and _pyseccomp_path() is not None

    def inside(self, domain_dir: Path) -> str | None:
        """Where domain_dir is in the launcher's view (root i is bound at /domains/i), or None."""
        for i, r in enumerate(self.roots):
            if domain_dir.is_relative_to(r):
                return str(Path(f"/domains/{i}") / domain_dir.relative_to(r))
        return None

    def start(self) -> None:
        self.close()
        for r in self.roots:
            r.mkdir(parents=True, exist_ok=True)
        seccomp_py = _pyseccomp_path()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        scr = "/scratch"
        boot = f"import sys; sys.path[:0] = [{LAUNCHER_LIB!r}]; from envs.launcher import main; main()"
        cmd = _bwrap_command(scr, seccomp_py, LAUNCHER_LIB)
        for i, r in enumerate(self.roots):
            cmd += ["--ro-bind", str(r), f"/domains/{i}"]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(self.scratch_mb << 20), "--tmpfs", scr,
                "--symlink", scr, "/tmp", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", scr, "--",
                str(Path(sys.executable).resolve()), "-I", "-S", "-B", "-c", boot, "--ctl", str(theirs.fileno()),
                "--scratch", scr, "--libraries", json.dumps(_library_names())]
        self._log = tempfile.TemporaryFile(prefix="agentscaler-launcher-log-")
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=self._log, start_new_session=True, close_fds=True,
                                         env=worker_env("/"))
        finally:
            theirs.close()
        self._ctl = ours
        ours.settimeout(CTL_TIMEOUT)
        try:
            hello = json.loads(ours.recv(4096) or b"null")
        except (OSError, ValueError) as exc:
            hello = {"error": str(exc)}
        if not isinstance(hello, dict) or hello.get("ok") is not True:
            log = log_tail(self._log)
            self.close()
            raise SandboxError(f"the shared sandbox launcher failed to start: {hello}\n{log}")

    def open(self, argv: list[str], ctl_fd: int) -> Hosted:
        """Fork a zygote running envs.worker.main(argv) that talks over ctl_fd (sent, not kept)."""
        for attempt in (0, 1):
            if self.proc is None or self.proc.poll() is not None:
                self.start()  # first use, or the launcher died: a new one
            try:
                socket.send_fds(self._ctl, [_dumps({"op": "open", "argv": argv}).encode()], [ctl_fd])
                msg, fds, _, _ = socket.recv_fds(self._ctl, 4096, 1)
            except OSError as exc:
                if attempt:
                    raise SandboxError(f"the shared sandbox launcher did not answer: {exc}") from None
                self.close()
                continue
            reply = json.loads(msg or b"null")
            if not isinstance(reply, dict) or reply.get("ok") is not True or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise SandboxError(f"the shared sandbox launcher could not open a worker: {reply}")
            self.opened += 1
            return Hosted(fds[0])
        raise SandboxError("the shared sandbox launcher did not answer")

    def close(self) -> None:
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


_LAUNCHER: Launcher | None = None  # the current shared launcher (shared_launcher), or None


@contextmanager
def shared_launcher(roots: list[Path]) -> Iterator[Launcher | None]:
    """Within it, this process's sandbox workers for domains under `roots` are forks of one shared
    launcher (started on first use; closed at the end) where Launcher.available(); elsewhere nothing
    changes. For a process that opens many domains one after another: a build's pool process."""
    global _LAUNCHER
    if _LAUNCHER is not None or not Launcher.available():
        yield _LAUNCHER
        return
    _LAUNCHER = Launcher(roots)
    try:
        yield _LAUNCHER
    finally:
        launcher, _LAUNCHER = _LAUNCHER, None
        launcher.close()
