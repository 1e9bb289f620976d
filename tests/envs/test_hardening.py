"""Hardening of the sandbox boundary (issue 22): attacks written as tool code, run through the real
sandbox, grouped by the class of the issue they belong to. Every attack here got through before the
fix (data corrupted, the parent hung, a secret leaked, the host's memory filled); each test says
what stops it now.

Tool code here is written straight into tools.py (no static check), so it may use what generated
code may not (os, ctypes, sys.argv): the sandbox itself must hold.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envs.episode import Environment
from envs.sandbox import REPO, SandboxError, WorkerProcess, bwrap_works, worker_lib
from envs.spec import ColumnSpec, DomainSpec, TableSpec, ToolSpec
from envs.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
from build import build_shop  # noqa: E402

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")

# The reply pipe: old workers named it in argv, now it is one of the few open descriptors.
_FDS = "import sys\ntry:\n    FDS = [int(sys.argv[sys.argv.index('--wfd') + 1])]\nexcept ValueError:\n    FDS = range(3, 64)\n"

TOOLS: dict[str, tuple[str, str, dict]] = {  # name -> (kind, body, properties)
    # class 1: secrets
    "leak_env": ("read", """
import os
texts = [repr(dict(os.environ))]
try:
    pids = os.listdir('/proc')
except OSError:
    pids = ['self', '1', '2', '3', str(os.getppid())]
for p in pids:
    if p.isdigit() or p == 'self':
        try:
            texts.append(open(f'/proc/{p}/environ', 'rb').read().decode('utf-8', 'replace'))
        except OSError:
            pass
return '\\n'.join(texts)""", {}),
    # class 2: unbounded writable mounts
    "fill_scratch": ("read", """
import os
total = 0
for d in ('/scratch', '/tmp'):
    i = 0
    try:
        while total < (160 << 20):
            with open(f'{d}/fill-{d[1:]}-{i}', 'wb') as f:
                f.write(b'x' * (1 << 20))
            total += 1 << 20
            i += 1
    except OSError:
        pass
return total""", {}),
    "write_outside_scratch": ("read", """
ok = []
for p in ('/x', '/dev/x', '/dev/shm/x', '/sandbox/x'):
    try:
        with open(p, 'wb') as f:
            f.write(b'x' * 4096)
        ok.append(p)
    except OSError:
        pass
return ok""", {}),
    "many_files": ("read", """
for i in range(3000):
    open(f'/scratch/e{i}', 'w').close()
return 'made'""", {}),
    "list_scratch": ("read", "import os\nreturn sorted(os.listdir('/scratch'))", {}),
    "memory_limit": ("read", "import resource\nreturn resource.getrlimit(resource.RLIMIT_AS)[0]", {}),
    # class 3: the parent's receive and send paths
    "flood_pipe": ("read", _FDS + """
import os, struct
body = b'{"ok":true,"id":0}'
for fd in FDS:
    try:
        os.write(fd, struct.pack('>II', len(body), 1_900_000_000) + body)
    except OSError:
        pass
chunk = bytes(65536)
while True:
    try:
        for fd in FDS:
            try:
                os.write(fd, chunk)
            except OSError:
                pass
    except BaseException:
        pass""", {}),
    "echo": ("read", "return len(text)", {"text": {"type": "string"}}),
    # class 4: forged replies and start-up reports
    "forge_right_id": ("read", _FDS + """
import os, json, struct, time
body = json.dumps({'ok': True, 'id': rid, 'content': 'forged'}).encode()
for fd in FDS:
    try:
        os.write(fd, struct.pack('>II', len(body), 0) + body)
    except OSError:
        pass
time.sleep(0.3)
return 'real'""", {"rid": {"type": "integer"}}),
    # class 5: the state oracle and what outlives an episode
    "poison_modules": ("read", """
import json
from envs import toolkit
json.dumps = lambda *a, **k: '"poisoned"'
toolkit.DB.now = lambda self: '1999-01-01T00:00:00'
db.conn.create_function('upper', 1, lambda s: 'poisoned')
return 'poisoned'""", {}),
    "probe_modules": ("read", """
import json
return [json.dumps([1]), db.now(), db.query("SELECT upper('a') AS u")[0]['u']]""", {}),
    "count_calls": ("read", "STATE['n'] += 1\nreturn STATE['n']", {}),
    "lower_cpu_limit": ("read", "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 1))\nreturn 'lowered'", {}),
    "lower_fd_limit": ("read", "import resource\nresource.prlimit(0, resource.RLIMIT_NOFILE, (4, 4))\nreturn 'lowered'", {}),
    "limits": ("read", "import resource\nreturn [resource.getrlimit(resource.RLIMIT_CPU)[0], resource.getrlimit(resource.RLIMIT_NOFILE)[0]]", {}),
    "hide_email_change": ("write", """
db.conn.create_function('as_norm_text', 1,
                        lambda v: 'ada@example.com' if v == 'evil@example.com' else (' '.join(v.casefold().split()) if isinstance(v, str) else v))
db.update('users', {'user_id': 'u1'}, {'email': 'evil@example.com'})
return 'changed'""", {}),
    "random_write": ("write", """
import os
v = os.urandom(6).hex()
db.update('users', {'user_id': 'u2'}, {'name': v})
return v""", {}),
    "hard_exit": ("read", "import os\nos._exit(3)", {}),
    # class 6: commit before checks
    "write_bad_output": ("write", "db.update('users', {'user_id': 'u3'}, {'name': 'Changed'})\nx = []\nx.append(x)\nreturn x", {}),
    "write_huge_output": ("write", "db.update('users', {'user_id': 'u3'}, {'name': 'Changed'})\nreturn 'x' * (5 << 20)", {}),
    # class 7: parent-side validation (schemas that hang or break the caller's check; deep outputs)
    "deep_output": ("read", "x = []\nfor _ in range(n):\n    x = [x]\nreturn x", {"n": {"type": "integer"}}),
    "count_items": ("read", "return len(items)", {"items": {"type": "array"}}),
    "tree": ("read", "return 'ok'", {"node": {"type": "array", "items": {"$ref": "#/properties/node"}},
                                     "size": {"type": "integer", "minimum": 0}}),
    "catastrophic": ("read", "return code", {"code": {"type": "string", "pattern": "^(a+)+$"}}),
    "slow_pattern": ("read", "return code", {"code": {"type": "string", "pattern": r"^[a-z]*[a-z]*[a-z]*[a-z]*[a-z]*\d$"}}),
    # class 10: signals to other processes
    "signal_others": ("read", """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
me, other = os.getpid(), os.getppid()
info = (ctypes.c_int * 32)(0, 0, -1)
def call(*args):
    ctypes.set_errno(0)
    r = libc.syscall(*args)
    return 0 if r >= 0 else ctypes.get_errno()
return {'tgkill': call(234, other, other, 0), 'tkill': call(200, other, 0),
        'rt_sigqueueinfo': call(129, other, 0, info), 'rt_tgsigqueueinfo': call(297, other, other, 0, info),
        'pidfd_open': call(434, other, 0), 'pidfd_send_signal': call(424, 0, 0, None, 0),
        'kill_init': call(62, 1, 0), 'tgkill_self': call(234, me, me, 0)}""", {}),
}

def _add_tools(dest: Path, tools: dict[str, tuple[str, str, dict]], top: str = "") -> Path:
    code = [f"\n\nSTATE = {{'n': 0}}\n{top}"]
    for name, (_, body, props) in tools.items():
        params = "".join(f", {p}" for p in props)
        code.append(f"\n\ndef attack_{name}(db{params}):\n" + textwrap.indent(body.strip("\n"), "    "))
    with open(dest / "tools.py", "a") as fh:
        fh.write("\n".join(code) + "\n")
    spec = DomainSpec.load(dest)
    spec.tools += [ToolSpec(name=f"attack_{n}", kind=kind, description=f"attack {n}",
                            parameters={"type": "object", "properties": props, "required": list(props)})
                   for n, (kind, _, props) in tools.items()]
    (dest / "spec.json").write_text(spec.model_dump_json(indent=2))
    return dest


@pytest.fixture()
def shop(tmp_path) -> Path:
    return _add_tools(build_shop(tmp_path / "shop"), TOOLS)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Environment.open(_add_tools(build_shop(tmp_path_factory.mktemp("ws") / "shop"), TOOLS), time_limit=1.0,
                         memory_mb=512)
    e.reset()
    yield e
    e.close()


def _normal_call_works(env: Environment) -> None:
    res = env.call("get_user", {"user_id": "u1"})
    assert res.ok and res.content["name"] == "Ada Lovelace", res.error


# --- class 1: secrets ------------------------------------------------------------------------------

CANARY = "canary-3f9a1c-do-not-leak"


@pytest.mark.parametrize("use_bwrap", [True, False], ids=["bwrap", "no-bwrap"])
def test_no_secret_of_the_caller_reaches_tool_code(shop, monkeypatch, use_bwrap):
    """The worker's environment is explicit: API keys and tokens of the caller are nowhere in it
    (os.environ, /proc/*/environ of every process it can see). Stopped by: the environment layer."""
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{CANARY}")
    monkeypatch.setenv("HF_TOKEN", f"hf-{CANARY}")
    monkeypatch.setenv("AGENTSCALER_UNSAFE_SANDBOX", "1")
    w = WorkerProcess(shop, use_bwrap=use_bwrap, time_limit=2.0)
    try:
        w.start()
        reply, content = w.request({"op": "call", "name": "attack_leak_env", "args": {}, "kind": "read"})
        assert reply["ok"], reply
        text = json.loads(content)
        assert "PATH" in text and CANARY not in text
    finally:
        w.close()


# --- class 2: writable mounts are bounded --------------------------------------------------------

def test_scratch_cannot_hold_more_than_its_budget(shop):
    """Writing 1 MB files to /scratch and /tmp stops at the scratch tmpfs size (one mount for both),
    and the next episode starts with an empty scratch. Stopped by: the tmpfs size (filesystem)."""
    with Environment.open(shop, time_limit=2.0, memory_mb=512) as e:
        res = e.call("attack_fill_scratch", {})
        assert res.ok, res.error
        assert res.content <= 40 << 20, f"tool code wrote {res.content >> 20} MB of host memory"
        e.reset()
        listing = e.call("attack_list_scratch", {})
        assert listing.ok and listing.content == [], listing.content


def test_nothing_but_scratch_is_writable_without_landlock(shop):
    """bubblewrap's own root and /dev are tmpfs mounts without a size: they are remounted read-only,
    so even without Landlock no write lands outside the bounded scratch. Stopped by: the mount layer."""
    w = WorkerProcess(shop, landlock=False, time_limit=2.0)
    try:
        w.start()
        reply, content = w.request({"op": "call", "name": "attack_write_outside_scratch", "args": {}, "kind": "read"})
        assert reply["ok"], reply
        assert json.loads(content) == []
    finally:
        w.close()


def test_many_empty_files_fail_the_call_and_are_removed(env):
    """tmpfs bounds bytes, not inodes (kernel memory): a call leaving over 1,024 files fails and
    scratch is emptied. Stopped by: the worker's scratch check after each call."""
    res = env.call("attack_many_files", {})
    assert not res.ok and "files in scratch" in res.error, res
    assert env.call("attack_list_scratch", {}).content == []
    _normal_call_works(env)


def test_scratch_is_counted_in_the_memory_budget(env):
    """The address-space limit is the budget less the scratch size (tmpfs pages are not in RLIMIT_AS)."""
    res = env.call("attack_memory_limit", {})
    assert res.ok and res.content <= (512 - 32) << 20, res.content >> 20


# --- class 3: receive and send paths -------------------------------------------------------------

@pytest.mark.timeout(90)
def test_a_worker_that_keeps_the_pipe_full_is_stopped(env):
    """Tool code writes a frame announcing a 1.9 GB reply and then keeps the reply pipe full for ever
    (catching the time-limit signal). The call fails within seconds and the next call works.
    Stopped by: the reply nonce (the frame is not ours); the reader's per-read deadline and size
    cap are tested with a scripted worker in test_transport.py."""
    t = time.monotonic()
    res = env.call("attack_flood_pipe", {})
    assert not res.ok and ("protocol" in res.error or "time limit" in res.error), res
    assert time.monotonic() - t < 15
    _normal_call_works(env)


def test_arguments_over_the_cap_are_refused_before_sending(env):
    """A call's request is capped like its reply (max_reply): 5 MB of arguments are an error, not a
    5 MB blocking write. Stopped by: the per-operation request cap."""
    res = env.call("attack_echo", {"text": "x" * (5 << 20)})
    assert not res.ok and "too large" in res.error, res
    assert env.call("attack_echo", {"text": "x" * 1000}).content == 1000


def _big_domain(dest: Path, mb: int) -> Path:
    build_shop(dest)
    spec = DomainSpec.load(dest)
    spec.tables.append(TableSpec(name="blobs", primary_key=["id"], columns=[
        ColumnSpec(name="id", type="integer", nullable=False), ColumnSpec(name="body")]))
    (dest / "spec.json").write_text(spec.model_dump_json(indent=2))
    seed = dest / "seed.sqlite"
    os.chmod(seed, 0o644)
    conn = sqlite3.connect(seed)
    conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO blobs VALUES (?, ?)", [(i, f"{i:08d}" * (1 << 17)) for i in range(mb)])
    conn.commit()
    conn.close()
    return dest


@pytest.mark.timeout(120)
def test_a_large_snapshot_is_received_in_linear_time(tmp_path):
    """A legitimate 40 MB database image crosses the pipe in well under a second (it took 13 s when
    every read copied the buffer so far). Fixed in: the parent's reader (one buffer of the
    announced size)."""
    dest = _big_domain(tmp_path / "big", 40)
    with Environment.open(dest) as e:
        e.call("get_user", {"user_id": "u1"})  # the image is the worker's to tell now
        t = time.monotonic()
        snap = e.snapshot()
        took = time.monotonic() - t
        assert len(snap) > 40 << 20
        assert took < 5, f"a {len(snap) >> 20} MB snapshot took {took:.1f} s"


# --- class 4: forged replies and reports ---------------------------------------------------------

def test_a_forged_reply_with_the_right_id_is_rejected(env):
    """Tool code writes a well-formed reply frame for its own call (the right id) and then sleeps, so
    its frame arrives first. The forged content is never accepted and the next call is not blamed.
    Stopped by: the per-request nonce the reply must echo."""
    rid = getattr(env.worker, "_seq", 0) + 1
    res = env.call("attack_forge_right_id", {"rid": rid})
    assert not res.ok, "the parent accepted a reply forged by tool code"
    assert "protocol" in res.error, res
    _normal_call_works(env)


def test_tool_code_cannot_forge_the_isolation_report(shop, monkeypatch):
    """tools.py's top-level code writes a start-up report claiming every layer (Landlock included)
    on a worker started without Landlock. Stopped by: the report comes from the zygote before any
    tool code is loaded; the forged frame then breaks the protocol and the start fails."""
    forged = {"ok": True, "layers": {"rlimits": True, "landlock": True, "seccomp": True, "socket_blocked": True,
                                     "fs_hidden": True, "fork_blocked": True, "uid": 65534, "secrets_hidden": True},
              "load_error": None, "missing": []}
    top = _FDS + textwrap.dedent(f"""
        import os as _os, json as _json, struct as _struct
        _body = _json.dumps({forged!r}).encode()
        for _fd in FDS:
            try:
                _os.write(_fd, _struct.pack('>II', len(_body), 0) + _body)
            except OSError:
                pass
        """)
    dest = _add_tools(build_shop(shop.parent / "forger"), {"noop": ("read", "return 1", {})}, top=top)
    monkeypatch.setenv("AGENTSCALER_UNSAFE_SANDBOX", "1")
    w = WorkerProcess(dest, use_bwrap=False, landlock=False)
    try:
        with pytest.raises(SandboxError, match="protocol"):
            w.start()
    finally:
        w.close()


# --- class 5: the state oracle, and what outlives an episode -------------------------------------

def test_rebound_modules_and_sql_functions_do_not_reach_the_next_episode(env):
    """Tool code rebinds json.dumps, the db helper's clock and an SQL function on the connection.
    After a reset none of it is there. Stopped by: a fresh child process per episode."""
    env.reset()
    assert env.call("attack_poison_modules", {}).ok
    env.reset()
    res = env.call("attack_probe_modules", {})
    assert res.ok and res.content == ["[1]", env.spec.clock, "A"], res.content


def test_module_globals_do_not_outlive_an_episode(env):
    env.reset()
    assert env.call("attack_count_calls", {}).content == 1
    assert env.call("attack_count_calls", {}).content == 2  # within an episode state is the tool's own
    env.reset()
    assert env.call("attack_count_calls", {}).content == 1


@pytest.mark.parametrize("attack", ["lower_cpu_limit", "lower_fd_limit"])
def test_tool_code_cannot_lower_its_own_limits(env, attack):
    """A lower CPU or descriptor limit would kill a later innocent call. Stopped by: seccomp
    (setrlimit, and prlimit64 with a new limit, after setup; Python reports setrlimit's EPERM as
    "not allowed to raise maximum limit")."""
    before = env.call("attack_limits", {}).content
    res = env.call(f"attack_{attack}", {})
    assert not res.ok and ("not permitted" in res.error or "not allowed" in res.error), res
    assert env.call("attack_limits", {}).content == before
    _normal_call_works(env)


def test_the_state_hash_ignores_sql_functions_rebound_by_tool_code(env):
    """A write tool changes an email and rebinds the SQL function the hash normalizes text with, so
    that the worker would see the seed. The hash and the diff see the change. Stopped by: the
    hash and diff are computed in the parent from the database image."""
    env.reset()
    seed_hash = env.state_hash()
    assert env.call("attack_hide_email_change", {}).ok
    assert env.state_hash() != seed_hash
    assert [(d["table"], d["column"], d["after"]) for d in env.diff()] == [("users", "email", "evil@example.com")]
    env.reset()


def test_a_rebuild_that_does_not_reproduce_the_episode_fails_it(env):
    """A write whose result differs on every run (os.urandom), then a crash: the replayed write
    answers differently, so the rebuilt state cannot be the state before the crash. The episode
    fails: the state is not silently replaced. Stopped by: the parent's check after the replay."""
    env.reset()
    assert env.call("attack_random_write", {}).ok
    env.state_hash()  # the state before the crash is known to the parent
    assert not env.call("attack_hard_exit", {}).ok
    with pytest.raises(SandboxError, match="lost"):
        env.state_hash()
    res = env.call("get_user", {"user_id": "u1"})
    assert not res.ok and "lost" in res.error
    env.reset()
    _normal_call_works(env)
    # the same without a hash before the crash: the replayed write's output differs
    assert env.call("attack_random_write", {}).ok
    assert not env.call("attack_hard_exit", {}).ok
    with pytest.raises(SandboxError, match="lost"):
        env.diff()
    env.reset()


def test_a_deterministic_episode_survives_a_crash(env):
    env.reset()
    assert env.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 2}).ok
    h = env.state_hash()
    assert not env.call("attack_hard_exit", {}).ok
    assert env.state_hash() == h
    env.reset()


# --- class 6: check, then commit -----------------------------------------------------------------

@pytest.mark.parametrize("attack", ["write_bad_output", "write_huge_output"])
def test_a_write_that_fails_its_reply_checks_leaves_no_trace(env, attack):
    """The tool writes, then returns a value that is not JSON or is too large: the call fails and
    its write is rolled back (it was committed first, and replay then dropped it). Fixed in: the
    worker checks the result before COMMIT."""
    env.reset()
    seed_hash = env.state_hash()
    res = env.call(f"attack_{attack}", {})
    assert not res.ok, res
    assert env.state_hash() == seed_hash and env.diff() == []


# --- class 7: parent-side validation and argument values ---------------------------------------

def _at_depth(frames: int, fn):
    """fn() called with `frames` more frames on the stack (a caller deep in asyncio, Prefect, ...)."""
    return fn() if frames <= 0 else _at_depth(frames - 1, fn)


def _deep(levels: int, leaf=None):
    v = [] if leaf is None else leaf
    for _ in range(levels):
        v = [v]
    return v


@pytest.mark.timeout(60)
def test_deeply_nested_arguments_are_a_tool_error(env):
    """call()/step()/call_batch() promise never to raise: JSON text nested 100,000 levels raised
    RecursionError out of json.loads, and a deep array passed the flat check and raised while the
    request was encoded. Stopped by: the depth bound (agentscaler.schemas) before any check."""
    text = "[" * 100_000 + "]" * 100_000
    for res in (env.call("attack_count_items", text), env.call("attack_count_items", '{"items": ' + text + "}"),
                env.step({"name": "attack_count_items", "arguments": text}),
                env.call("attack_count_items", {"items": _deep(100_000)}),
                env.call("attack_count_items", {"items": _deep(70)}),
                *env.call_batch([("attack_count_items", {"items": _deep(100_000)})])):
        assert not res.ok and ("deeper than" in res.error or "too deeply" in res.error), res
    assert env.call("attack_count_items", {"items": _deep(30)}).content == 1
    _normal_call_works(env)


def test_malformed_tool_calls_are_tool_errors(env):
    """step() and call_batch() raised AttributeError/TypeError on call shapes they did not expect."""
    for call in ({"function": 5}, {"function": "get_user"}, {"name": "get_user", "function": None}, 5, None):
        res = env.step(call)
        assert isinstance(res.ok, bool) and not res.ok, (call, res)
    results = env.call_batch([5, ("get_user",), {"function": []}, ("get_user", {"user_id": "u1"})])
    assert [r.ok for r in results] == [False, False, False, True], results
    _normal_call_works(env)


@pytest.mark.timeout(60)
def test_one_deep_argument_does_not_break_the_tool(env):
    """A recursive parameter schema and a 5,000-level argument: RecursionError inside jsonschema
    marked the *schema* malformed in a cache shared by the whole process, so every later call of
    the tool, in any environment, failed with "invalid parameter schema"."""
    res = env.call("attack_tree", {"node": _deep(5000), "size": 1})
    assert not res.ok and "invalid parameter schema" not in res.error, res
    res = env.call("attack_tree", {"node": [[]], "size": -1})
    assert not res.ok and "minimum" in res.error, res
    assert env.call("attack_tree", {"node": [[], [[]]], "size": 1}).ok


@pytest.mark.timeout(60)
def test_a_catastrophic_pattern_never_runs(env):
    """`^(a+)+$` against 40 a's and a '!' backtracks 2^40 times in the caller's process (it ran for
    hours). Stopped by: the schema check refuses the pattern; the tool's calls are tool errors."""
    t0 = time.monotonic()
    res = env.call("attack_catastrophic", {"code": "a" * 40 + "!"})
    assert not res.ok and "invalid parameter schema" in res.error and "quantifier" in res.error, res
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(60)
def test_a_slow_pattern_is_stopped_at_the_deadline(env):
    """Five adjacent `[a-z]*` pass the static screen but backtrack polynomially: minutes at 200
    characters in the stdlib engine. Stopped by: the check's deadline (every regex runs under it)."""
    t0 = time.monotonic()
    res = env.call("attack_slow_pattern", {"code": "a" * 20_000})
    assert not res.ok and "longer than" in res.error, res
    assert time.monotonic() - t0 < 30
    assert env.call("attack_slow_pattern", {"code": "abc1"}).ok


def test_a_deep_tool_output_does_not_crash_the_reader(env):
    """A tool returns a list nested 950 levels: the worker encodes it, and the caller's json.loads
    raised RecursionError when it read `content` from a deep stack (a rollout under asyncio).
    Stopped by: the worker refuses outputs nested deeper than envs.pipe.MAX_NESTING."""
    res = env.call("attack_deep_output", {"n": 950})
    got = _at_depth(300, lambda: (res.ok, res.error, res.content if res.ok else None))
    assert got[0] is False and "deeper than" in got[1], got[:2]
    assert env.call("attack_deep_output", {"n": 50}).ok
    _normal_call_works(env)


# --- class 10: smaller ones ------------------------------------------------------------------------

def test_nan_does_not_pass_a_minimum(env):
    """NaN compares false with everything, so `minimum: 0` let it through to the tool."""
    for args in ({"query": "Mug", "max_price": float("nan")}, '{"query": "Mug", "max_price": NaN}',
                 {"query": "Mug", "max_price": float("-inf")}):
        res = env.call("find_products", args)
        assert not res.ok and "NaN" in res.error, res


def test_no_signal_reaches_another_process(shop):
    """tgkill/tkill/rt_sigqueueinfo/rt_tgsigqueueinfo to the parent process, pidfd_open/
    pidfd_send_signal, kill: all EPERM, also without Landlock (whose ABI 6 scopes signals where the
    kernel has it); the child may not signal itself either (nothing in the worker needs it).
    Stopped by: the child's seccomp filter."""
    w = WorkerProcess(shop, landlock=False)
    try:
        w.start()
        reply, content = w.request({"op": "call", "name": "attack_signal_others", "args": {}, "kind": "read"})
        assert reply["ok"], reply
        got = json.loads(content)
        assert got == {k: errno.EPERM for k in got} and len(got) == 8, got
    finally:
        w.close()


def _leaky_domain(dest: Path) -> Path:
    _big_domain(dest, 24)
    return _add_tools(dest, {"touch_blob": ("write", "db.update('blobs', {'id': 0}, {'body': 'changed'})\nreturn 1", {}),
                             "hog": ("read", """
chunks = []
try:
    while True:
        chunks.append(bytearray(1 << 20))
except MemoryError:
    del chunks[-12:]
HOG.append(chunks)
return len(chunks)""", {})}, top="HOG = []")


@pytest.mark.timeout(120)
def test_a_state_operation_on_a_worker_out_of_memory_recycles_it(tmp_path):
    """A read tool keeps all but a few MB of the worker's memory; the next state operation (over a
    24 MB table a write touched) needs more. It is answered by a fresh child with the episode
    rebuilt, not raised. Fixed in: Environment's state path recycles a worker whose state
    operation fails."""
    dest = _leaky_domain(tmp_path / "leaky")
    with Environment.open(dest, memory_mb=320, time_limit=10.0) as e:
        seed_hash = e.state_hash()
        assert e.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 1}).ok
        assert e.call("attack_touch_blob", {}).ok
        res = e.call("attack_hog", {})
        assert res.ok, res.error
        h = e.state_hash()
        assert h != seed_hash
        assert sorted({d["table"] for d in e.diff()}) == ["blobs", "orders", "products", "users"]


def test_a_worker_refuses_a_scratch_folder_that_holds_files(tmp_path):
    """Scratch is emptied when tool code leaves too many files, so a shared folder (a profiling
    script once passed /tmp) is refused before any tool runs, and its files stay."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "keep.txt").write_text("someone else's")
    with pytest.raises(ValueError, match="must be an empty folder"):
        Worker(str(tmp_path / "domain"), 1.0, 1 << 20, scratch=str(shared))
    assert (shared / "keep.txt").read_text() == "someone else's"


def test_worker_library_carries_its_bytecode(tmp_path, monkeypatch):
    """The worker's mounted library (envs.sandbox.worker_lib): envs without tau2, each module with
    its compiled bytecode, one folder per content (named by a hash of the sources), built once."""
    monkeypatch.setenv("AGENTSCALER_CACHE", str(tmp_path / "cache"))
    lib = worker_lib(None)
    assert lib.parent.parent == tmp_path / "cache" and worker_lib(None) == lib
    for mod in ("worker", "store", "pipe", "toolkit", "__init__"):
        src = lib / "envs" / f"{mod}.py"
        assert src.read_bytes() == (REPO / "envs" / f"{mod}.py").read_bytes()
        assert Path(importlib.util.cache_from_source(str(src))).is_file()
    assert not (lib / "envs" / "tau2").exists() and not (lib / "pyseccomp.py").exists()
