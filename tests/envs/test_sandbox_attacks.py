"""Attacks written as tool code into a temp copy of the shop domain, run through the real sandbox.

Each attack must come back as a clear tool error (or be harmless), and the next normal call
must work, restarting the worker where the attack killed or hung it.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from envs.episode import Environment
from envs.sandbox import SandboxError, WorkerProcess, bwrap_works
from envs.spec import DomainSpec, ToolSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
from build import build_shop  # noqa: E402

ATTACKS = {
    "loop": "while True:\n    pass",
    "stubborn_loop": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
    "sleep": "import time\ntime.sleep(10**6)",
    "memory": "x = bytearray(8 << 30)\nreturn len(x)",
    "memory_list": "x = []\nwhile True:\n    x.append('y' * (1 << 20))",
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "huge_output": "return 'x' * (40 << 20)",
    "huge_nested_output": "return {'rows': ['x' * (1 << 20)] * 40}",
    "stdout": "import os, sys\nprint('LEAK-OUT' * 1000)\nsys.stderr.write('LEAK-ERR')\nos.write(1, b'LEAK-FD1')\nos.write(2, b'LEAK-FD2')\nreturn 'printed'",
    "read_passwd": "return open('/etc/passwd').read()",
    "read_workspace": "return open(SECRET).read()",
    "read_domain_scenarios": "return open('/sandbox/domain/scenarios.jsonl').read()",
    "list_root": "import os\nreturn sorted(os.listdir('/'))",
    "write_tools": "open('/sandbox/domain/tools.py', 'a').write('# pwned')\nreturn 'wrote'",
    "write_host": "open(SEED, 'r+b').write(b'pwned')\nreturn 'wrote'",
    "write_tmp_then_read": "open('/scratch/f.txt', 'w').write('ok')\nreturn open('/scratch/f.txt').read()",
    "write_big_file": "f = open('/scratch/big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))",
    "socket": "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\nreturn 'connected'",
    "socket_unix": "import socket\ns = socket.socket(socket.AF_UNIX)\nreturn 'socket made'",
    "subprocess": "import subprocess\nreturn subprocess.run(['id'], capture_output=True).stdout.decode()",
    "os_system": "import os\nrc = os.system('id > /scratch/id.txt')\nif rc != 0:\n    raise RuntimeError(f'os.system failed rc={rc}')\nreturn rc",
    "ctypes_segfault": "import ctypes\nreturn ctypes.string_at(0xdead0000, 10).decode()",
    "ctypes_syscall": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.syscall(41, 2, 1, 0)\nif fd < 0:\n    raise OSError(ctypes.get_errno(), 'socket syscall refused')\nreturn fd",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn 'killed'",
    "kill_all": "import os, signal\nos.kill(-1, signal.SIGKILL)\nreturn 'killed'",
    "sigstop_self": "import signal\nsignal.raise_signal(signal.SIGSTOP)\nreturn 'resumed'",
    "alarm_later": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_DFL)\nsignal.setitimer(signal.ITIMER_VIRTUAL, 0.05)\nsignal.alarm(1)\nreturn 'armed'",
    "exit": "import sys\nsys.exit(3)",
    "hard_exit": "import os\nos._exit(3)",
    "recursion": "def f(n):\n    return f(n + 1)\nreturn f(0)",
    "deep_json": "x = []\nfor _ in range(100000):\n    x = [x]\nreturn x",
    "sql_attach": "db.execute(\"ATTACH DATABASE '/scratch/x.db' AS x\")\nreturn 'attached'",
    "sql_drop": "db.execute('DROP TABLE users')\nreturn 'dropped'",
    "sql_pragma": "db.execute('PRAGMA writable_schema = 1')\nreturn 'pragma'",
    "sql_load_extension": "return db.query(\"SELECT load_extension('/scratch/evil')\")",
    "sql_vacuum_into": "db.execute(\"VACUUM INTO '/scratch/copy.db'\")\nreturn 'vacuumed'",
    "sql_slow_query": "return db.query('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c')",
    "read_tool_writes": "db.execute('DELETE FROM users')\nreturn 'deleted'",
    "read_tool_commits": "db.execute('DELETE FROM users')\ndb.conn.commit()\nreturn 'committed'",
    # the reply pipe is one of the few open descriptors: write a well-formed frame (a guessed nonce) to each
    "forge_reply": "import os, json, struct\nbody = json.dumps({'ok': True, 'content': 'forged'}).encode()\nfor fd in range(3, 64):\n    try:\n        os.write(fd, struct.pack('>II16s', len(body), 0, bytes(16)) + body)\n    except OSError:\n        pass\nreturn 'real'",
    "garbage_reply": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'\\x00\\x00\\x00\\x05\\x00\\x00\\x00\\x00{{{{{')\n    except OSError:\n        pass\nimport time\ntime.sleep(0.2)\nreturn 'real'",
    "not_json": "return object.__new__(type('X', (), {'__repr__': None}))",
}


def _write_attacks(dest: Path) -> None:
    code = ["\n\n# --- attacks ---", f"SECRET = {str(dest.parent / 'secret.txt')!r}",
            f"SEED = {str(dest / 'seed.sqlite')!r}"]
    for name, body in ATTACKS.items():
        code.append(f"\n\ndef attack_{name}(db):\n" + textwrap.indent(body, "    "))
    with open(dest / "tools.py", "a") as fh:
        fh.write("\n".join(code) + "\n")
    spec = DomainSpec.load(dest)
    spec.tools += [ToolSpec(name=f"attack_{n}", kind="read", description=f"attack {n}",
                            parameters={"type": "object", "properties": {}}) for n in ATTACKS]
    (dest / "spec.json").write_text(spec.model_dump_json(indent=2))
    (dest / "scenarios.jsonl").write_text('{"gold": "secret gold answers"}\n')
    (dest.parent / "secret.txt").write_text("workspace secret")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    if not bwrap_works():
        pytest.skip("bubblewrap cannot create namespaces here: the attack suite needs every layer")
    dest = build_shop(tmp_path_factory.mktemp("ws") / "shop")
    _write_attacks(dest)
    e = Environment.open(dest, time_limit=1.0, memory_mb=512)
    e.reset()
    yield e
    e.close()


def _normal_call_works(env: Environment) -> None:
    res = env.call("get_user", {"user_id": "u1"})
    assert res.ok, res.error
    assert res.content["name"] == "Ada Lovelace"


# (attack, expected fragment of the error, does the worker get restarted?)
CASES = [
    ("loop", "time limit", False),
    ("stubborn_loop", "time limit", True),
    ("sleep", "time limit", False),
    ("memory", "out of memory", False),
    ("memory_list", "out of memory|time limit", False),
    ("fork_bomb", "not permitted", False),
    ("huge_output", "too large", False),
    ("huge_nested_output", "too large|time limit", None),  # encoding 40 MB may outlast the deadline
    ("read_passwd", "No such file", False),
    ("read_workspace", "No such file", False),
    ("read_domain_scenarios", "No such file", False),
    ("write_tools", "Read-only file system", False),
    ("write_host", "No such file", False),
    ("write_big_file", "", None),
    ("socket", "not permitted", False),
    ("socket_unix", "not permitted", False),
    ("subprocess", "not permitted", False),
    ("os_system", "os.system failed", False),
    ("ctypes_segfault", "crashed", True),
    ("ctypes_syscall", "socket syscall refused", False),
    ("kill_parent", "not permitted", False),
    ("kill_all", "not permitted", False),
    ("sigstop_self", "not permitted", False),  # the child may not signal any process, itself included
    ("exit", "SystemExit", False),
    ("hard_exit", "crashed", True),
    ("recursion", "recursion", False),
    ("deep_json", "JSON", False),
    ("sql_attach", "not authorized", False),
    ("sql_drop", "not authorized", False),
    ("sql_pragma", "not authorized", False),
    ("sql_load_extension", "not authorized", False),
    ("sql_slow_query", "time limit", False),
    ("read_tool_commits", "not authorized", False),
    ("not_json", "not JSON", False),
    ("forge_reply", "protocol", True),
    ("garbage_reply", "protocol", True),
]


@pytest.mark.parametrize("attack,fragment,restarts", CASES, ids=[c[0] for c in CASES])
def test_attack_is_contained(env, attack, fragment, restarts):
    before = env.restarts
    res = env.call(f"attack_{attack}", {})
    assert not res.ok, f"attack {attack} was not stopped: {str(res.content)[:200]}"
    assert any(f in res.error for f in fragment.split("|")), res.error
    if restarts is not None:
        assert (env.restarts > before) == restarts, res.error
    _normal_call_works(env)


def test_isolation_layers_reported(env):
    iso = env.isolation
    assert set(iso) >= {"uid", "network", "filesystem", "seccomp", "rlimits"}
    # This machine supports every required layer (bwrap as root + pyseccomp).
    assert all(iso[k] for k in ("uid", "network", "filesystem", "seccomp", "rlimits")), iso


def test_stdout_stderr_output_goes_nowhere(env, capfd):
    res = env.call("attack_stdout", {})
    assert res.ok and res.content == "printed"
    out, err = capfd.readouterr()
    assert "LEAK" not in out and "LEAK" not in err
    _normal_call_works(env)


def test_root_listing_shows_only_the_sandbox(env):
    res = env.call("attack_list_root", {})
    if not res.ok:  # Landlock also denies listing "/"
        assert "Permission denied" in res.error
        return
    assert "work" not in res.content and "sandbox" in res.content and "scratch" in res.content


def test_scratch_is_writable(env):
    res = env.call("attack_write_tmp_then_read", {})
    assert res.ok and res.content == "ok"


def test_signal_tricks_do_not_reach_later_calls(env):
    res = env.call("attack_alarm_later", {})
    if env.isolation["seccomp"]:  # handlers and VIRTUAL/PROF timers cannot be touched at all
        assert not res.ok and "Operation not permitted" in res.error
    else:  # harmless here: the worker clears timers and handlers after each call
        assert res.ok
    import time
    time.sleep(1.3)
    for _ in range(3):
        _normal_call_works(env)


def test_sql_side_effects_never_escape(env):
    h = env.state_hash()
    for a in ("read_tool_writes", "read_tool_commits", "sql_drop", "sql_vacuum_into"):
        env.call(f"attack_{a}", {})
    assert env.state_hash() == h
    assert env.diff() == []
    _normal_call_works(env)


def test_write_state_survives_a_restart(env):
    env.reset()
    res = env.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 2})
    assert res.ok
    h = env.state_hash()
    before = env.restarts
    assert not env.call("attack_hard_exit", {}).ok
    assert env.restarts == before + 1
    assert env.state_hash() == h  # rebuilt by replaying the episode's writes
    env.reset()


def test_refuses_without_isolation(tmp_path, monkeypatch):
    dest = build_shop(tmp_path / "ws" / "shop")
    _write_attacks(dest)
    monkeypatch.delenv("AGENTSCALER_UNSAFE_SANDBOX", raising=False)
    w = WorkerProcess(dest, use_bwrap=False)  # as root without bwrap: no separate uid
    with pytest.raises(SandboxError, match="refusing"):
        w.start()
    w.close()
    monkeypatch.setenv("AGENTSCALER_UNSAFE_SANDBOX", "1")
    w = WorkerProcess(dest, use_bwrap=False)
    iso = w.start()
    assert iso["seccomp"] and iso["rlimits"] and not iso["pid"]

    def call(name):
        return w.request({"op": "call", "name": name, "args": {}, "kind": "read"})[0]

    reply, content = w.request({"op": "call", "name": "get_user", "args": {"user_id": "u2"}, "kind": "read"})
    assert reply["ok"] and json.loads(content)["name"] == "Alan Turing"  # a call's content is the payload
    assert "not permitted" in call("attack_socket")["error"]
    assert "not permitted" in call("attack_fork_bomb")["error"]
    if iso["landlock"]:  # without a mount namespace, Landlock alone keeps the filesystem out of reach
        assert iso["filesystem"]
        for attack in ("read_passwd", "read_workspace", "write_host"):
            r = call(f"attack_{attack}")
            assert not r["ok"] and ("Permission denied" in r["error"] or "No such file" in r["error"]), r
        r = call("attack_write_tmp_then_read")
        assert not r["ok"]  # /scratch does not exist here; the worker's own scratch is its cwd
    w.close()


def test_broken_tool_code_is_a_clear_error(tmp_path):
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text("def get_user(db, user_id):\n    return 1\n\ndef broken(:\n")
    with pytest.raises(SandboxError, match="SyntaxError"):
        Environment.open(dest, unsafe=not bwrap_works())
    with Environment.open(dest, check_code=False, unsafe=not bwrap_works()) as e:
        res = e.call("get_user", {"user_id": "u1"})
        assert not res.ok and "SyntaxError" in res.error
    json.loads((dest / "spec.json").read_text())  # the domain files are untouched
