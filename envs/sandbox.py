"""Parent side of the sandbox: start the worker (bubblewrap + seccomp + rlimits), talk to it over a
private pipe, enforce a wall-clock deadline and a reply cap, and kill/restart it when it misbehaves.

Layers (reported as `WorkerProcess.isolation`, a dict of layer -> bool):
  uid        - the worker runs as uid 65534 in its own user namespace (bwrap --unshare-user)
  network    - no network: own network namespace (bwrap --unshare-net) and socket() denied
  filesystem - only the interpreter, the envs package and the domain's tools/spec/seed, read-only;
               writable scratch is a tmpfs; /etc, /work, /root... are not there (bwrap's mount
               namespace, or Landlock over private copies where bwrap is unusable)
  pid        - own pid namespace: the parent and other processes are invisible
  seccomp    - socket/connect/exec/fork/clone/kill/ptrace/mount... fail with EPERM
  rlimits    - RLIMIT_AS, NOFILE, NPROC, FSIZE, CPU, CORE
  landlock   - where the kernel has it: reads only of the interpreter, the envs package and the
               domain copy, writes only to scratch, no TCP, signals scoped (also without bwrap)
Without uid/network/filesystem/seccomp/rlimits the runtime refuses to start unless `unsafe=True`
or AGENTSCALER_UNSAFE_SANDBOX=1.

Transport: caller and worker each busy-wait up to `spin_us` (default 200 us) for the other's next
message before sleeping on the pipe. On these VMs a sleeping process takes 25-75 us to wake, more
than most tool calls; within the spin a round trip is ~3 us. AGENTSCALER_SPIN_US=0 turns it off.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from envs.pipe import HEADER, spin_read

REPO = Path(__file__).resolve().parent.parent
REQUIRED_LAYERS = ("uid", "network", "filesystem", "seccomp", "rlimits")
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class SandboxError(RuntimeError):
    """The sandbox cannot start (missing isolation, broken domain files)."""


class WorkerCrashed(Exception):
    """The worker died, hung or sent garbage; it has been killed. The message is for the caller."""


def unsafe_from_env() -> bool:
    return os.environ.get("AGENTSCALER_UNSAFE_SANDBOX", "").strip().lower() in ("1", "true", "yes")


def _pyseccomp_path() -> Path | None:
    try:
        import pyseccomp  # noqa: F401
    except Exception:  # noqa: BLE001
        return None
    return Path(sys.modules["pyseccomp"].__file__).resolve()


@lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """True when bubblewrap can create user+net+pid namespaces here (checked once per process)."""
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        r = subprocess.run([exe, "--unshare-user", "--uid", "65534", "--gid", "65534", "--unshare-net",
                            "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "true"],
                           capture_output=True, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


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


# RLIMIT_CPU is a lifetime backstop only (calls are policed by the per-call deadline): a day.
DEFAULT_LIMITS = {"as": 1 << 30, "nofile": 64, "nproc": 64, "fsize": 16 << 20, "cpu": 86400, "core": 0}


class WorkerProcess:
    """One sandboxed worker for one domain directory. Not thread-safe: one call at a time."""

    def __init__(self, domain_dir: Path, *, unsafe: bool = False, time_limit: float = 2.0,
                 max_reply: int = 4 << 20, memory_mb: int = 1024, use_bwrap: bool | None = None,
                 landlock: bool = True, spin_us: int | None = None):
        self.domain_dir = Path(domain_dir).resolve()
        self.unsafe = unsafe or unsafe_from_env()
        self.time_limit = time_limit
        self.grace = 1.0 + time_limit * 0.5
        self.max_reply = max_reply
        self.limits = dict(DEFAULT_LIMITS, **{"as": memory_mb << 20})
        self.use_bwrap = bwrap_works() if use_bwrap is None else use_bwrap
        self.landlock = landlock
        self.spin_ns = (default_spin_us() if spin_us is None else spin_us) * 1000
        self.proc: subprocess.Popen | None = None
        self.isolation: dict[str, bool] = {}
        self.load_error: str | None = None
        self.missing: list[str] = []
        self.restarts = 0
        self._rfd = self._wfd = -1
        self._seq = 0
        self._poll = None
        self._scratch: str | None = None
        self._log: Any = None

    # start / stop -------------------------------------------------------------------------------
    def _command(self, rfd: int, wfd: int, scratch: str) -> list[str]:
        seccomp_py = _pyseccomp_path()
        exe = str(Path(sys.executable).resolve())
        spec = json.loads((self.domain_dir / "spec.json").read_text("utf-8"))
        if self.use_bwrap:
            lib, dom, scr = "/sandbox/lib", "/sandbox/domain", "/scratch"
        else:
            # No mount namespace: the worker gets copies of what it needs (Landlock then limits
            # reads to them and the interpreter; the domain's other files stay out of reach).
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
        worker = [exe, "-I", "-S", "-B", "-c", boot, "--rfd", str(rfd), "--wfd", str(wfd), "--domain", dom,
                  "--scratch", scr, "--time-limit", repr(self.time_limit), "--max-reply", str(self.max_reply),
                  "--spin-us", str(self.spin_ns // 1000),
                  "--limits", json.dumps(self.limits), "--seccomp", "1" if seccomp_py else "0",
                  "--landlock", "1" if self.landlock else "0", "--lib", lib,
                  "--tmp", "1" if self.use_bwrap else "0"]
        if not self.use_bwrap:
            return worker
        d = self.domain_dir
        cmd = [shutil.which("bwrap"), "--unshare-user", "--uid", "65534", "--gid", "65534", "--unshare-net",
               "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
               "--new-session", "--hostname", "sandbox", *_root_binds(),
               "--ro-bind", str(REPO / "envs"), f"{lib}/envs"]
        if seccomp_py:
            cmd += ["--ro-bind", str(seccomp_py), f"{lib}/pyseccomp.py"]
        for key, default in (("code_path", "tools.py"), ("seed_path", "seed.sqlite")):
            rel = spec.get(key, default)
            src = d / rel
            if src.exists():
                cmd += ["--ro-bind", str(src), f"{dom}/{rel}"]
        cmd += ["--ro-bind", str(d / "spec.json"), f"{dom}/spec.json",
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", scr, "--chdir", scr]
        return cmd + ["--"] + worker

    def start(self) -> dict[str, bool]:
        self.stop()
        try:
            spec = json.loads((self.domain_dir / "spec.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise SandboxError(f"{self.domain_dir}: cannot read spec.json: {exc}") from None
        for key, default in (("code_path", "tools.py"), ("seed_path", "seed.sqlite")):
            if not (self.domain_dir / spec.get(key, default)).is_file():
                raise SandboxError(f"{self.domain_dir}: {spec.get(key, default)} is missing")
        self._scratch = tempfile.mkdtemp(prefix="agentscaler-worker-")
        req_r, req_w = os.pipe()  # parent -> worker
        rep_r, rep_w = os.pipe()  # worker -> parent
        self._log = tempfile.TemporaryFile(prefix="agentscaler-worker-log-")
        try:
            self.proc = subprocess.Popen(self._command(req_r, rep_w, self._scratch), pass_fds=(req_r, rep_w),
                                         stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                         start_new_session=True, close_fds=True)
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._wfd, self._rfd = req_w, rep_r
        os.set_blocking(rep_r, False)  # _recv spins on it, then polls
        self._poll = select.poll()
        self._poll.register(self._rfd, select.POLLIN)
        try:
            hello, _ = self._recv(time.monotonic() + 30.0 + self.time_limit * 2)
        except WorkerCrashed as exc:
            log = self._read_log()
            self.stop()
            raise SandboxError(f"sandbox worker for {self.domain_dir} failed to start: {exc}\n{log}") from None
        probe = hello.get("layers", {})
        self.isolation = {
            "uid": bool(self.use_bwrap and probe.get("uid") == 65534) or (os.getuid() != 0 and probe.get("uid") != os.getuid()),
            "network": bool(self.use_bwrap) or bool(probe.get("socket_blocked")),
            "filesystem": bool(probe.get("fs_hidden")) and bool(self.use_bwrap or probe.get("landlock")),
            "pid": bool(self.use_bwrap),
            "seccomp": bool(probe.get("seccomp")) and bool(probe.get("socket_blocked")) and bool(probe.get("fork_blocked")),
            "rlimits": bool(probe.get("rlimits")),
            "landlock": bool(probe.get("landlock")),
        }
        self.load_error = hello.get("load_error")
        self.missing = list(hello.get("missing", []))
        missing_layers = [k for k in REQUIRED_LAYERS if not self.isolation[k]]
        if missing_layers and not self.unsafe:
            self.stop()
            raise SandboxError(
                f"refusing to run generated code without isolation layers {missing_layers} "
                f"(bwrap usable: {self.use_bwrap}); pass unsafe=True or set AGENTSCALER_UNSAFE_SANDBOX=1")
        return self.isolation

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0)
            return self._log.read()[-3000:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        if self.proc is not None:
            try:
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
        for fd in (self._rfd, self._wfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rfd = self._wfd = -1

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

    # transport ----------------------------------------------------------------------------------
    def _recv(self, deadline: float, rid: int | None = None) -> tuple[dict[str, Any], bytes]:
        # Strict request/response: whatever is in the pipe belongs to this reply, so read big chunks
        # (one poll + one read for a normal reply).
        rfd, poll = self._rfd, self._poll
        buf = b""
        need = HEADER.size
        header: tuple[int, int] | None = None
        while True:
            while len(buf) < need:
                chunk = spin_read(rfd, max(need - len(buf), 1 << 16), self.spin_ns)
                if chunk is None:
                    left = deadline - time.monotonic()
                    if left <= 0 or not poll.poll(left * 1000.0):
                        raise WorkerCrashed("timeout")
                    chunk = os.read(rfd, max(need - len(buf), 1 << 16))
                if not chunk:
                    raise WorkerCrashed("exited")
                buf = buf + chunk if buf else chunk
                if header is None and len(buf) >= HEADER.size:
                    break
            if header is None:
                header = HEADER.unpack_from(buf)
                if header[0] > self.max_reply + 4096 or header[1] > (1 << 31):
                    raise WorkerCrashed(f"reply too large ({header[0]} bytes)")
                need = HEADER.size + header[0] + header[1]
                if len(buf) < need and need > (1 << 16):
                    buf = bytearray(buf)  # large payload: grow in place
                continue
            end = HEADER.size + header[0]
            try:
                obj = json.loads(buf[HEADER.size:end])
            except ValueError:
                raise WorkerCrashed("malformed reply") from None
            if not isinstance(obj, dict):
                raise WorkerCrashed("malformed reply")
            if rid is not None and obj.get("id") != rid:
                raise WorkerCrashed("broke the worker protocol (a reply out of sequence) and was stopped")
            if len(buf) > need or poll.poll(0):
                # More than one reply to one request: tool code wrote to the pipe itself.
                raise WorkerCrashed("broke the worker protocol (wrote to its reply pipe) and was stopped")
            return obj, bytes(buf[end:need]) if header[1] else b""

    def request(self, obj: dict[str, Any], payload: bytes = b"", timeout: float | None = None) -> tuple[dict, bytes]:
        """One round trip. Raises WorkerCrashed (after killing the worker) on hang/crash/garbage."""
        if self.proc is None:
            raise WorkerCrashed("not running")
        self._seq += 1
        obj["id"] = rid = self._seq
        body = _dumps(obj).encode("utf-8", "surrogatepass")
        data = HEADER.pack(len(body), len(payload)) + body + payload
        deadline = time.monotonic() + (self.time_limit + self.grace if timeout is None else timeout)
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._wfd, view)
                view = view[n:]
            return self._recv(deadline, rid)
        except WorkerCrashed as exc:
            msg = self._explain(str(exc))
            self.kill()
            raise WorkerCrashed(msg) from None
        except OSError as exc:
            msg = self._explain(f"pipe error {exc}")
            self.kill()
            raise WorkerCrashed(msg) from None

    def _explain(self, reason: str) -> str:
        if reason == "timeout":
            return f"exceeded the {self.time_limit:g} s time limit and was stopped"
        if reason == "exited":
            rc = None
            if self.proc is not None:
                try:
                    rc = self.proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
            return "crashed (the sandbox worker exited" + (f" with status {rc})" if rc is not None else ")")
        if reason == "malformed reply":
            return "broke the worker protocol (malformed reply) and was stopped"
        return reason

    def close(self) -> None:
        self.stop()
