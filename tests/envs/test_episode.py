"""The Environment API on the shop fixture, through the real sandboxed worker."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.episode import Environment, ToolResult
from envs.sandbox import SandboxError, WorkerCrashed, bwrap_works

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
# These tests are about the API, not isolation (tests/envs/test_sandbox_attacks.py is): where
# bubblewrap is unusable they run the worker with the layers the machine has.
UNSAFE = not bwrap_works()
from build import build_shop, build_shop_leaving_traces  # noqa: E402


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    return build_shop(tmp_path_factory.mktemp("ws") / "shop")


@pytest.fixture(scope="module")
def env(shop):
    with Environment.open(shop, unsafe=UNSAFE) as e:
        yield e


def test_reset_call_hash_diff(env):
    obs = env.reset()
    assert obs["domain"] == "shop" and {t["function"]["name"] for t in obs["tools"]} >= {"get_user", "place_order"}
    seed_hash = env.state_hash()
    res = env.call("get_user", {"user_id": "u1"})
    assert res == ToolResult(True, {"user_id": "u1", "name": "Ada Lovelace", "email": "ada@example.com",
                                    "balance": 120.0}, None)
    res = env.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 2})
    assert res.ok and res.content["order_id"] == "o4" and res.content["created_at"] == "2024-05-15T15:00:00"
    assert env.state_hash() != seed_hash
    diff = env.diff()
    assert {"table": "products", "key": {"product_id": "p1"}, "column": "stock", "before": 10, "after": 8} in diff
    assert {"table": "users", "key": {"user_id": "u1"}, "column": "balance", "before": 120.0, "after": 103.0} in diff
    added = [d for d in diff if d["table"] == "orders"]
    assert added[0]["column"] is None and added[0]["after"]["total"] == 17.0 and "created_at" not in added[0]["after"]
    env.reset()
    assert env.state_hash() == seed_hash and env.diff() == []


def test_same_calls_same_hash(env):
    hashes = []
    for _ in range(2):
        env.reset()
        env.call("place_order", {"user_id": "u3", "product_id": "p4", "quantity": 3})
        env.call("update_email", {"user_id": "u2", "email": "turing@example.org"})
        hashes.append(env.state_hash())
    assert hashes[0] == hashes[1]


def test_cached_hash_equals_full_recompute(env):
    """The worker recomputes only tables written since the last hash; check it against a full
    recompute (restore() hashes every table) after writes interleaved with hash calls."""
    env.reset()
    for order in (("u1", "p1"), ("u1", "p4"), ("u3", "p4")):
        env.state_hash()
        assert env.call("place_order", {"user_id": order[0], "product_id": order[1]}).ok
        env.call("get_user", {"user_id": "u1"})
    assert env.call("cancel_order", {"order_id": "o4"}).ok
    assert env.call("update_email", {"user_id": "u2", "email": "x@y.z"}).ok
    cached = env.state_hash()
    env.restore(env.snapshot())
    assert env.state_hash() == cached
    assert env.call("cancel_order", {"order_id": "o5"}).ok  # reuses a prepared statement
    cached = env.state_hash()
    env.restore(env.snapshot())
    assert env.state_hash() == cached


def test_argument_errors_are_clear(env):
    env.reset()
    cases = [
        ("get_user", {}, "'user_id' is a required property"),
        ("get_user", {"user_id": 7}, "7 is not of type 'string'"),
        ("get_user", {"user_id": "u1", "x": 1}, "Additional properties are not allowed"),
        ("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 9}, "9 is greater than the maximum of 5"),
        ("get_user", '{"user_id": ', "not valid JSON"),
        ("get_user", [1], "must be a JSON object"),
        ("no_such_tool", {}, "unknown tool 'no_such_tool'"),
    ]
    for name, args, msg in cases:
        res = env.call(name, args)
        assert not res.ok and msg in res.error, (name, res.error)
        assert res.error.startswith(("invalid arguments for", "arguments of", "unknown tool"))
    assert env.call("get_user", '{"user_id": "u2"}').content["name"] == "Alan Turing"
    assert env.call("get_user", {"user_id": "nobody"}).error == "user nobody not found"


def test_result_text_is_what_the_agent_sees(env):
    """A call's content arrives as JSON text: text() hands it over as is, content parses it."""
    env.reset()
    res = env.call("get_user", {"user_id": "u1"})
    assert res.text() == json.dumps(res.content, ensure_ascii=False)
    assert res.content["name"] == "Ada Lovelace" and res.model_dump()["ok"] is True
    orders = env.call("list_user_orders", {"user_id": "u1"})
    assert isinstance(orders.content, list) and orders.text() == json.dumps(orders.content, ensure_ascii=False)
    assert res == ToolResult(True, dict(res.content)) and res != orders
    assert ToolResult(True, "plain").text() == "plain" and ToolResult(False, None, "boom").text() == "Error: boom"


def test_sleeping_transport_gives_the_same_results(shop):
    """spin_us=0 (each side sleeps on the pipe at once) is the same protocol, only slower."""
    with Environment.open(shop, unsafe=UNSAFE, spin_us=0) as slow, Environment.open(shop, unsafe=UNSAFE) as fast:
        assert slow.worker.spin_ns == 0 and fast.worker.spin_ns > 0
        for e in (slow, fast):
            e.reset()
        for name, args in [("get_user", {"user_id": "u1"}), ("place_order", {"user_id": "u1", "product_id": "p1",
                                                                               "quantity": 1}), ("get_order", {"order_id": "o4"})]:
            assert slow.call(name, args) == fast.call(name, args)
        assert slow.state_hash() == fast.state_hash()


def test_a_worker_on_one_cpu_runs_there_and_answers_alike(shop):
    """cpu=k: the sandbox's processes (the zygote, its children forked later) run on CPU k only;
    results are the same. A CPU this process may not use is refused before anything starts."""
    import os

    from tests.fault.orphans import descendants

    cpu = max(os.sched_getaffinity(0))
    with Environment.open(shop, unsafe=UNSAFE, spin_us=0, cpu=cpu) as pinned, \
            Environment.open(shop, unsafe=UNSAFE, spin_us=0) as free:
        for e in (pinned, free):
            e.reset()
            e.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 1})
            e.reset()  # a fresh child, forked after the pin
        assert pinned.call("get_user", {"user_id": "u1"}) == free.call("get_user", {"user_id": "u1"})
        python = str(Path(sys.executable).resolve()).encode()
        workers = [p for p in descendants(pinned.worker.proc.pid) | {pinned.worker.proc.pid}  # not bwrap itself
                   if open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0] == python]
        assert len(workers) >= 2  # the zygote and a child at least
        assert all(os.sched_getaffinity(p) == {cpu} for p in workers)
        assert free.worker.cpu is None
    with pytest.raises(ValueError, match="cpu 4096 is not one this process may run on"):
        Environment.open(shop, unsafe=UNSAFE, cpu=4096)


def test_a_worker_follows_the_caller_and_a_caller_elsewhere_is_held_for_one_call(shop, monkeypatch):
    """cpu="caller": the worker's child (and each new one after a reset) moves to the CPU the caller
    was on at its first call, and answers as a free worker does. A call that finds the caller on
    another CPU holds its thread on the worker's CPU for that round trip and gives back the thread's
    own CPUs after it, also when the call fails; a thread that may not run there is left alone.
    Which CPU the caller is on is scripted here (envs.sandbox._sched_getcpu), and the affinity
    changes are recorded around the real os.sched_setaffinity: this is about our own logic."""
    import os

    from envs import sandbox
    from tests.fault.orphans import descendants

    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    home, other = max(allowed), min(allowed)
    real = os.sched_setaffinity
    seen: list[set[int]] = []

    def recording(pid: int, mask) -> None:
        assert pid == 0
        seen.append(set(mask))
        real(pid, mask)

    with pytest.raises(ValueError, match='cpu="caller"'):
        Environment.open(shop, unsafe=UNSAFE, spin_us=50, cpu="caller")
    try:
        with Environment.open(shop, unsafe=UNSAFE, cpu="caller") as env, \
                Environment.open(shop, unsafe=UNSAFE, spin_us=0) as free:
            assert env.worker.spin_ns == 0
            real(0, {home})
            env.reset()
            free.reset()
            assert env.call("get_user", {"user_id": "u1"}) == free.call("get_user", {"user_id": "u1"})
            assert env.worker._home == home
            workers = [p for p in descendants(env.worker.proc.pid) if os.sched_getaffinity(p) == {home}]
            assert workers  # the child serving calls moved there (the zygote did not)
            env.call("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 1})
            env.reset()  # a new child: it moves there with its first request
            env.call("get_user", {"user_id": "u1"})
            assert any(os.sched_getaffinity(p) == {home} for p in descendants(env.worker.proc.pid))
            real(0, allowed)
            monkeypatch.setattr(os, "sched_setaffinity", recording)
            monkeypatch.setattr(sandbox, "_sched_getcpu", lambda: home)
            env.call("get_user", {"user_id": "u1"})
            assert seen == []  # on the worker's CPU already: nothing to change
            monkeypatch.setattr(sandbox, "_sched_getcpu", lambda: other)
            assert env.call("get_user", {"user_id": "u1"}).ok
            assert seen == [{home}, allowed] and os.sched_getaffinity(0) == allowed
            seen.clear()
            with pytest.raises(WorkerCrashed):  # a deadline already past: the round trip fails
                env.worker.request({"op": "call", "name": "get_user", "args": {"user_id": "u1"}, "kind": "read"},
                                   timeout=1e-9)
            assert seen == [{home}, allowed] and os.sched_getaffinity(0) == allowed
            seen.clear()
            real(0, {other})  # this thread may not run on the worker's CPU: a plain round trip
            assert env.call("get_user", {"user_id": "u1"}).ok
            assert seen == [] and os.sched_getaffinity(0) == {other}
    finally:
        real(0, allowed)


def test_requests_orjson_refuses_reach_the_tool_alike(env):
    """A call's request is encoded by orjson, and by the stdlib where orjson refuses (a lone
    surrogate, an integer past 64 bits, a non-string key): the tool sees the same value either way."""
    from envs.sandbox import encode_request

    for value in ({"user_id": "u\ud800"}, {"user_id": "u1", "n": 2 ** 70}, {1: "x"}, {"t": (1, 2.5, None)}):
        got = json.loads(encode_request(value))
        assert got == json.loads(json.dumps(value)), value
    with pytest.raises(TypeError):
        encode_request({"x": object()})
    env.reset()
    res = env.call("get_user", {"user_id": "u\ud800"})  # the stdlib path, through the real worker
    # the value arrived intact (SQLite then refuses to bind it: a clean tool error)
    assert not res.ok and "'\\ud800' in position 1: surrogates not allowed" in res.error


def test_spin_setting_is_checked(monkeypatch):
    from envs.sandbox import default_spin_us

    monkeypatch.setenv("AGENTSCALER_SPIN_US", "lots")
    with pytest.raises(ValueError, match="AGENTSCALER_SPIN_US"):
        default_spin_us()
    monkeypatch.setenv("AGENTSCALER_SPIN_US", "0")
    assert default_spin_us() == 0


def test_failed_write_changes_nothing(env):
    env.reset()
    h = env.state_hash()
    res = env.call("cancel_order", {"order_id": "o2"})
    assert not res.ok and "delivered" in res.error
    res = env.call("place_order", {"user_id": "u2", "product_id": "p3", "quantity": 2})
    assert not res.ok and "insufficient balance" in res.error
    assert env.state_hash() == h and env.diff() == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["get_user", "find_products", "get_order", "list_user_orders"]),
                          st.sampled_from(["u1", "u2", "zz", "o1", "o3", "Mug", "", "p1"])), max_size=6))
def test_reads_never_change_state(env, calls):
    env.reset()
    env.call("place_order", {"user_id": "u1", "product_id": "p4", "quantity": 1})
    h, d = env.state_hash(), env.diff()
    key = {"get_user": "user_id", "find_products": "query", "get_order": "order_id", "list_user_orders": "user_id"}
    for name, value in calls:
        env.call(name, {key[name]: value})
    assert env.state_hash() == h and env.diff() == d


def test_batch_matches_one_by_one(env):
    calls = [{"name": "get_user", "arguments": {"user_id": "u1"}},
             {"name": "place_order", "arguments": {"user_id": "u1", "product_id": "p3", "quantity": 1}},
             ("get_order", {"order_id": "o4"}),
             {"name": "get_user", "arguments": {"user_id": 1}},
             {"name": "nope", "arguments": {}},
             {"function": {"name": "cancel_order", "arguments": '{"order_id": "o4"}'}}]
    env.reset()
    batch = env.call_batch(calls)
    h_batch = env.state_hash()
    env.reset()
    single = [env.step(c) if not isinstance(c, tuple) else env.call(*c) for c in calls]
    assert batch == single
    assert env.state_hash() == h_batch
    assert [r.ok for r in batch] == [True, True, True, False, False, True]


def test_snapshot_restore_and_diff_against(env):
    env.reset()
    env.call("place_order", {"user_id": "u3", "product_id": "p1", "quantity": 1})
    snap = env.snapshot()
    h = env.state_hash()
    env.call("update_email", {"user_id": "u3", "email": "grace@navy.mil"})
    assert env.diff(against=snap) == [{"table": "users", "key": {"user_id": "u3"}, "column": "email",
                                       "before": "grace@example.com", "after": "grace@navy.mil"}]
    env.restore(snap)
    assert env.state_hash() == h


def test_seed_file_untouched_and_close(shop):
    digest = hashlib.sha256((shop / "seed.sqlite").read_bytes()).hexdigest()
    e = Environment.open(shop, unsafe=UNSAFE)
    e.reset()
    e.call("place_order", {"user_id": "u1", "product_id": "p1"})
    proc = e.worker.proc
    e.close()
    assert proc.poll() is not None
    assert hashlib.sha256((shop / "seed.sqlite").read_bytes()).hexdigest() == digest
    with pytest.raises(SandboxError):
        e.call("get_user", {"user_id": "u1"})


def test_missing_tool_function_is_a_tool_error(tmp_path):
    dest = build_shop(tmp_path / "shop")
    code = (dest / "tools.py").read_text().replace("def update_email(", "def _renamed(")
    (dest / "tools.py").write_text(code)
    with Environment.open(dest, unsafe=UNSAFE) as e:
        assert e.missing_tools == ["update_email"]
        res = e.call("update_email", {"user_id": "u1", "email": "a@b.c"})
        assert not res.ok and "not implemented" in res.error


def test_malformed_parameter_schema_is_a_tool_error(tmp_path):
    dest = build_shop(tmp_path / "shop")
    spec = json.loads((dest / "spec.json").read_text())
    for tool in spec["tools"]:
        if tool["name"] == "get_user":
            tool["parameters"]["properties"]["user_id"] = {"type": "foo"}
    (dest / "spec.json").write_text(json.dumps(spec))
    with Environment.open(dest, unsafe=UNSAFE) as e:
        res = e.call("get_user", {"user_id": "u1"})
        assert not res.ok and "get_user has an invalid parameter schema" in res.error
        assert e.call("update_email", {"user_id": "u1", "email": "a@b.c"}).ok


def test_missing_domain_files_are_clear_errors(tmp_path):
    dest = build_shop(tmp_path / "shop")
    (dest / "seed.sqlite").unlink()
    with pytest.raises(SandboxError, match="seed.sqlite is missing"):
        Environment.open(dest, unsafe=UNSAFE)
    (dest / "spec.json").write_text("{not json")
    with pytest.raises(SandboxError, match="cannot read spec.json"):
        Environment.open(dest, unsafe=UNSAFE)


def test_moved_environment_keeps_serving_and_restarts_from_its_new_folder(shop, tmp_path):
    """A worker opened on a folder whose files then move (a build's staging folder) keeps serving
    fresh episodes from what it loaded; after moved(), a worker that has to start again (here:
    killed) starts from the new folder, the old one being gone."""
    import os
    import shutil
    import signal

    staged = shutil.copytree(shop, tmp_path / "staged")
    e = Environment.open(staged, unsafe=UNSAFE)
    try:
        e.reset()
        before = e.call("get_user", {"user_id": "u1"})
        final = tmp_path / "final"
        final.mkdir()
        for p in staged.iterdir():
            p.rename(final / p.name)
        staged.rmdir()
        e.moved(final)
        e.reset()
        e.call("place_order", {"user_id": "u1", "product_id": "p1"})
        e.reset()  # a fresh child of the same zygote: nothing read from the old folder
        assert e.call("get_user", {"user_id": "u1"}) == before
        pid = e.worker.proc.pid
        os.killpg(pid, signal.SIGKILL)  # the worker dies (as on a crash)
        e.worker.proc.wait(timeout=10)
        # The call that finds it dead, even while a child it left still answers (under load the child
        # outlived the sandbox for a moment and served this call): it is told so and starts again.
        lost = e.call("get_user", {"user_id": "u1"})
        assert not lost.ok and "sandbox worker exited" in lost.error
        e.reset()
        got = e.call("get_user", {"user_id": "u1"})
        assert got == before and e.worker.proc.pid != pid
        assert e.domain_dir == final and e.worker.domain_dir == final.resolve()
    finally:
        e.close()



@pytest.mark.skipif(UNSAFE, reason="tool code writes files only where scratch is writable (bubblewrap)")
def test_restart_starts_from_the_seed_in_the_same_child_forgetting_globals_and_files(tmp_path):
    """restart(): the next episode starts from the seed in the same sandbox child (no fork, and no
    round trip of its own), with tools.py run afresh and scratch emptied: a module global and a file
    that tool code left, and a write's state, are gone. A call's snapshot=True brings a write's
    image in its reply (state_hash() then needs no round trip)."""
    with Environment.open(build_shop_leaving_traces(tmp_path / "shop"), unsafe=UNSAFE) as e:
        e.reset()
        seed = e.state_hash()
        user = e.call("get_user", {"user_id": "u2"}).content
        assert e.call("remember", {"note": "north"}).content == {"seen": ["north"], "files": ["note-1"]}
        assert e.call("remember", {"note": "south"}).content == {"seen": ["north", "south"],
                                                                "files": ["note-1", "note-2"]}
        forks, trips = [], []
        fresh, request = e.worker.fresh, e.worker.request
        e.worker.fresh = lambda *a, **k: forks.append(1) or fresh(*a, **k)
        e.worker.request = lambda *a, **k: trips.append(a[0]["op"]) or request(*a, **k)
        for note in ("east", "west"):
            assert e.call("update_email", {"user_id": "u2", "email": f"{note}@x.org"}, snapshot=True).ok
            assert e.state_hash() != seed and trips[-1] == "call"  # the image came with the write
            e.restart()
            assert e.state_hash() == seed and trips[-1] == "call"  # known here: the seed
            assert e.call("remember", {"note": note}).content == {"seen": [note], "files": ["note-1"]}
            assert e.call("get_user", {"user_id": "u2"}).content == user  # the write is gone
        assert forks == [] and trips == ["call"] * 6
        e.restart()  # verification's replay too: each episode without the files of the one before
        got = list(e.replay([[("remember", {"note": "north"})], [("remember", {"note": "south"})]]))
        assert [r[0].content for r, _ in got] == [{"seen": [n], "files": ["note-1"]} for n in ("north", "south")]
        e.reset()  # reset() is still a fresh child
        assert forks == [1] and e.call("remember", {"note": "east"}).content == {"seen": ["east"], "files": ["note-1"]}
