"""The shared sandbox launcher (envs.launcher): many domains' workers forked from one bubblewrap.

Real sandboxes throughout: two copies of the shop domain opened through one launcher must each get
every isolation layer, answer as a domain's own sandbox does, and be kept from each other's files,
scratch and processes by Landlock; a worker's crash or the launcher's death must cost only what it
hosts.
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from envs import sandbox
from envs.episode import Environment
from envs.spec import DomainSpec, ToolSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
from build import build_shop  # noqa: E402

PROBES = {
    "read_other_seed": "return len(open(OTHER + '/seed.sqlite', 'rb').read())",
    "read_other_tools": "return open(OTHER + '/tools.py').read()[:20]",
    "read_own_scenarios": "return open(HERE + '/scenarios.jsonl').read()",
    "write_own_seed": "open(HERE + '/seed.sqlite', 'r+b').write(b'pwned')\nreturn 'wrote'",
    "list_other": "import os\nreturn os.listdir(OTHER)",
    "read_proc": "return open('/proc/1/cmdline', 'rb').read().decode('latin-1')",
    "kill_all": "import os, signal\nos.kill(-1, signal.SIGKILL)\nreturn 'killed'",
    "write_scratch": "import os\nopen('f.txt', 'w').write(os.getcwd())\nreturn open('f.txt').read()",
    "write_shared_scratch": "open('/scratch/f.txt', 'w').write('x')\nreturn 'wrote'",
    "list_scratch": "import os\nreturn sorted(os.listdir('..'))",
    "hard_exit": "import os\nos._exit(3)",
}


def _domain(root: Path, name: str, other: str) -> Path:
    dest = build_shop(root / name)
    (dest / "scenarios.jsonl").write_text('{"secret": "gold"}\n')
    # the paths in the launcher's view: the one root is bound at /domains/0 (sandbox.Launcher.inside)
    code = ["\n\n# --- probes ---", f"HERE = '/domains/0/{name}'", f"OTHER = '/domains/0/{other}'"]
    code += [f"\n\ndef probe_{n}(db):\n" + textwrap.indent(body, "    ") for n, body in PROBES.items()]
    with open(dest / "tools.py", "a") as fh:
        fh.write("\n".join(code) + "\n")
    spec = DomainSpec.load(dest)
    spec.tools += [ToolSpec(name=f"probe_{n}", kind="read", description=f"probe {n}",
                            parameters={"type": "object", "properties": {}}) for n in PROBES]
    (dest / "spec.json").write_text(spec.model_dump_json(indent=2))
    return dest


@pytest.fixture(scope="class")
def pair(tmp_path_factory):
    if not sandbox.Launcher.available():
        pytest.skip("no shared launcher here (it needs bubblewrap, pyseccomp and Landlock ABI 6+)")
    root = tmp_path_factory.mktemp("domains")
    a, b = _domain(root, "a", "b"), _domain(root, "b", "a")
    with sandbox.shared_launcher([root]) as launcher:
        ea = Environment.open(a, time_limit=1.0, memory_mb=512)
        eb = Environment.open(b, time_limit=1.0, memory_mb=512)
        yield launcher, ea, eb
        ea.close()
        eb.close()


def _works(env: Environment) -> None:
    res = env.call("get_user", {"user_id": "u1"})
    assert res.ok and res.content["name"] == "Ada Lovelace", res


class TestTwoDomainsOneLauncher:
    """Two domains' workers open at once through one launcher (closed at the end of the class)."""

    def test_both_workers_are_hosted_with_every_layer(self, pair):
        launcher, ea, eb = pair
        assert launcher.opened >= 2
        for env in (ea, eb):
            assert isinstance(env.worker.proc, sandbox.Hosted)  # forked by the launcher, not a bubblewrap of its own
            assert all(env.isolation.values()), env.isolation
            env.reset()
            _works(env)


    def test_writes_stay_in_their_own_episode(self, pair):
        _, ea, eb = pair
        ea.reset()
        eb.reset()
        h = eb.state_hash()
        assert ea.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 2}).ok
        assert ea.state_hash() != h and eb.state_hash() == h
        ea.reset()


    @pytest.mark.parametrize("probe", ["read_other_seed", "read_other_tools", "list_other", "read_own_scenarios",
                                       "write_own_seed", "read_proc", "write_shared_scratch", "list_scratch"])
    def test_landlock_keeps_a_domain_to_its_own_files(self, pair, probe):
        _, ea, _ = pair
        res = ea.call(f"probe_{probe}", {})
        assert not res.ok, f"{probe} was not stopped: {str(res.content)[:200]}"
        assert "Permission denied" in res.error or "Read-only file system" in res.error, res.error
        _works(ea)


    def test_a_worker_writes_only_its_own_scratch_folder(self, pair):
        _, ea, eb = pair
        ra, rb = ea.call("probe_write_scratch", {}), eb.call("probe_write_scratch", {})
        assert ra.ok and rb.ok, (ra, rb)
        assert ra.content.startswith("/scratch/z") and rb.content.startswith("/scratch/z") and ra.content != rb.content


    def test_no_signal_reaches_another_process(self, pair):
        _, ea, eb = pair
        res = ea.call("probe_kill_all", {})
        assert not res.ok and "not permitted" in res.error, res
        _works(ea)
        _works(eb)


    def test_a_crash_restarts_only_its_own_worker(self, pair):
        launcher, ea, eb = pair
        before_a, before_b, opened = ea.restarts, eb.restarts, launcher.opened
        assert not ea.call("probe_hard_exit", {}).ok
        assert ea.restarts == before_a + 1 and eb.restarts == before_b
        _works(ea)
        _works(eb)
        assert launcher.opened == opened  # a child crashed: its zygote forked the next, no new worker


def test_a_killed_launcher_is_replaced_on_the_next_open(tmp_path):
    if not sandbox.Launcher.available():
        pytest.skip("no shared launcher here")
    a = build_shop(tmp_path / "a")
    with sandbox.shared_launcher([tmp_path]) as launcher:
        env = Environment.open(a)
        env.reset()
        _works(env)
        first, restarts = launcher.proc.pid, env.restarts
        launcher.proc.kill()
        launcher.proc.wait()
        deadline = time.monotonic() + 10
        while env.worker.proc.poll() is None and time.monotonic() < deadline:  # the pid namespace goes down
            time.sleep(0.01)
        assert env.worker.proc.poll() is not None, "the worker outlived its launcher"
        res = env.call("get_user", {"user_id": "u1"})  # as for a sandbox of its own that was killed
        assert not res.ok and "restarted" in res.error, res
        _works(env)
        assert env.restarts == restarts + 1 and launcher.proc.pid != first  # a new launcher hosts it
        env.close()


def test_outside_the_roots_a_worker_gets_its_own_sandbox(tmp_path):
    if not sandbox.Launcher.available():
        pytest.skip("no shared launcher here")
    a = build_shop(tmp_path / "outside" / "a")
    with sandbox.shared_launcher([tmp_path / "roots"]) as launcher:
        env = Environment.open(a)
        assert not isinstance(env.worker.proc, sandbox.Hosted) and launcher.opened == 0
        env.close()


def test_switched_off_by_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTSCALER_SHARED_SANDBOX", "0")
    assert not sandbox.Launcher.available()
    with sandbox.shared_launcher([tmp_path]) as launcher:
        assert launcher is None


def test_a_launcher_that_cannot_start_leaves_each_worker_its_own_sandbox(monkeypatch, tmp_path):
    """Our fallback logic: Launcher.start is made to fail (a stand-in for a kernel or bubblewrap that
    refuses the shared sandbox); the worker still starts, in a sandbox of its own, with every layer."""
    if not sandbox.Launcher.available():
        pytest.skip("no shared launcher here")

    def refuse(self):
        raise sandbox.SandboxError("the shared sandbox launcher failed to start: refused (test)")

    monkeypatch.setattr(sandbox.Launcher, "start", refuse)
    a = build_shop(tmp_path / "a")
    with sandbox.shared_launcher([tmp_path]) as launcher:
        env = Environment.open(a)
        assert not isinstance(env.worker.proc, sandbox.Hosted) and "refused (test)" in launcher.failed
        assert all(env.isolation[k] for k in sandbox.REQUIRED_LAYERS), env.isolation
        env.reset()
        _works(env)
        env.close()
