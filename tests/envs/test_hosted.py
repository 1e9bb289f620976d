"""Hosted episodes (envs.hosted): many episodes of one domain in one real sandbox worker. Each keeps
its own rows and its own tools.py globals, gives the results a worker of its own gives, and a crash
costs only the episodes of the crashed worker (the innocent ones are rebuilt without an error)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envs.episode import Environment
from envs.hosted import EpisodeSlot, OpenRefused
from envs.sandbox import bwrap_works

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "domains" / "shop"))
UNSAFE = not bwrap_works()  # about hosting, not isolation (test_sandbox_attacks.py is)
from build import build_shop  # noqa: E402

# Hand-written additions to the shop's tools.py (not statically checked, like any hand-written
# tools.py): a module global that counts calls, and a way for a call to kill its process.
EXTRA = '''
import os as _os
_seen = []
_plain_get_user = get_user


def get_user(db, user_id: str) -> dict:
    _seen.append(user_id)
    return dict(_plain_get_user(db, user_id), calls_in_this_namespace=len(_seen))


_plain_get_order = get_order


def get_order(db, order_id: str) -> dict:
    if order_id == "crash":
        _os._exit(3)
    return _plain_get_order(db, order_id)
'''


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    d = build_shop(tmp_path_factory.mktemp("ws") / "shop")
    (d / "tools.py").write_text((d / "tools.py").read_text() + EXTRA)
    return d


def test_episodes_keep_their_own_rows_and_globals(shop):
    a, b, c = Environment.open_hosted(shop, episodes=3, unsafe=UNSAFE)
    try:
        assert a.worker.host is b.worker.host is c.worker.host  # one worker
        for e in (a, b, c):
            e.reset()
        seed_hash = c.state_hash()
        assert a.call("update_email", {"user_id": "u1", "email": "a@x.org"}).ok
        assert a.call("get_user", {"user_id": "u1"}).content["email"] == "a@x.org"
        got = b.call("get_user", {"user_id": "u1"}).content
        assert got["email"] == "ada@example.com"  # a's write is not in b
        assert got["calls_in_this_namespace"] == 1  # a's call count is not in b's tools.py globals
        assert a.call("get_user", {"user_id": "u1"}).content["calls_in_this_namespace"] == 2
        assert c.state_hash() == seed_hash and b.state_hash() == seed_hash != a.state_hash()
        a.reset()  # a fresh slot: seed rows, tools.py run afresh
        assert a.state_hash() == seed_hash
        assert a.call("get_user", {"user_id": "u1"}).content["calls_in_this_namespace"] == 1
    finally:
        for e in (a, b, c):
            e.close()
    assert a.worker.host.worker.proc is None  # the worker stopped with its last episode


CALLS = [("get_user", {"user_id": "u1"}), ("find_products", {"query": "a"}),
         ("place_order", {"user_id": "u1", "product_id": "p1", "quantity": 2}),
         ("list_user_orders", {"user_id": "u1"}), ("cancel_order", {"order_id": "nope"}),
         ("update_email", {"user_id": "u2", "email": "b@y.org"}), ("get_user", {"user_id": "u2"})]


def test_hosted_results_equal_a_worker_of_its_own(shop):
    with Environment.open(shop, unsafe=UNSAFE) as own:
        own.reset()
        want = [own.call(n, a).text() for n, a in CALLS]
        want_hash, want_diff = own.state_hash(), own.diff()
    hosted = Environment.open_hosted(shop, episodes=2, unsafe=UNSAFE)
    try:
        for e in hosted:
            e.reset()
        got = [[e.call(n, a).text() for e in hosted] for n, a in CALLS]  # interleaved on one pipe
        assert [g[0] for g in got] == want and [g[1] for g in got] == want
        assert all(e.state_hash() == want_hash and e.diff() == want_diff for e in hosted)
    finally:
        for e in hosted:
            e.close()


def test_a_crash_costs_only_the_crashed_workers_episodes(shop):
    a, b = Environment.open_hosted(shop, episodes=2, unsafe=UNSAFE)
    other = Environment.open(shop, unsafe=UNSAFE)
    try:
        for e in (a, b, other):
            e.reset()
        assert a.call("update_email", {"user_id": "u1", "email": "a@x.org"}).ok
        assert other.call("update_email", {"user_id": "u1", "email": "o@x.org"}).ok
        a_hash = a.state_hash()
        bad = b.call("get_order", {"order_id": "crash"})
        assert not bad.ok and "crashed" in bad.error
        # a's state went with the child; it is rebuilt from its writes and its next call just works
        res = a.call("get_user", {"user_id": "u1"})
        assert res.ok and res.content["email"] == "a@x.org", res.error
        assert a.state_hash() == a_hash and a.worker.restarts == 1
        assert b.call("get_user", {"user_id": "u1"}).content["email"] == "ada@example.com"
        # another worker's episode never noticed
        assert other.call("get_user", {"user_id": "u1"}).content["email"] == "o@x.org" and other.restarts == 0
    finally:
        for e in (a, b, other):
            e.close()


def _close(envs):
    for e in envs:
        e.close()


def test_a_step_serves_each_episode_its_own_results_in_order(shop):
    """Environment.call_many: one message per worker; every episode gets its own answers, in the
    order asked, equal to a worker of its own; episodes of one message stay apart."""
    with Environment.open(shop, unsafe=UNSAFE) as own:
        own.reset()
        want = [own.call(n, a).text() for n, a in CALLS]
    x = Environment.open_hosted(shop, episodes=3, unsafe=UNSAFE)
    y = Environment.open_hosted(shop, episodes=2, unsafe=UNSAFE)
    plain = Environment.open(shop, unsafe=UNSAFE)
    envs = [x[0], y[0], plain, x[1], y[1], x[2]]
    try:
        for e in envs:
            e.reset()
        for n, a in CALLS:  # one step per call: every episode in it, workers mixed
            got = Environment.call_many([(e, n, a) for e in envs])
            assert [r.text() for r in got] == [want[CALLS.index((n, a))]] * len(envs)
        # each episode writes its own address and reads it back in the same message; the counts of
        # calls are per tools.py namespace (get_user ran twice in each episode above)
        step = [(e, "update_email", {"user_id": "u1", "email": f"e{k}@x.org"}) for k, e in enumerate(envs)]
        step += [(e, "get_user", {"user_id": "u1"}) for e in reversed(envs)]
        got = Environment.call_many(step)
        assert all(r.ok for r in got), [r.error for r in got]
        reads = got[len(envs):][::-1]
        assert [r.content["email"] for r in reads] == [f"e{k}@x.org" for k in range(len(envs))]
        assert [r.content["calls_in_this_namespace"] for r in reads] == [3] * len(envs)
        assert len({e.state_hash() for e in envs}) == len(envs)
        # bad input stays per call: an unknown tool and a schema error beside good calls
        bad = Environment.call_many([(x[0], "nope", {}), (x[1], "get_user", {"user_id": 5}), (x[2], "get_user", {"user_id": "u2"})])
        assert not bad[0].ok and "unknown tool" in bad[0].error and not bad[1].ok and bad[2].ok
    finally:
        _close(envs)


def test_a_crash_mid_step_costs_only_the_crashed_workers_episodes(shop):
    a = Environment.open_hosted(shop, episodes=3, unsafe=UNSAFE)
    b = Environment.open_hosted(shop, episodes=2, unsafe=UNSAFE)
    envs = [*a, *b]
    try:
        for e in envs:
            e.reset()
        wrote = Environment.call_many([(e, "update_email", {"user_id": "u1", "email": f"e{k}@x.org"})
                                       for k, e in enumerate(envs)])
        assert all(r.ok for r in wrote)
        hashes = [e.state_hash() for e in envs]
        step = [(a[0], "get_user", {"user_id": "u1"}), (b[0], "get_user", {"user_id": "u1"}),
                (a[1], "get_order", {"order_id": "crash"}), (a[2], "get_user", {"user_id": "u1"}),
                (b[1], "get_user", {"user_id": "u1"})]
        got = Environment.call_many(step)
        assert not got[2].ok and "crashed" in got[2].error
        for k, r in zip((0, 3, 2, 4), (got[0], got[1], got[3], got[4])):  # the others: their own rows
            assert r.ok and r.content["email"] == f"e{k}@x.org", r.error
        assert a[0].worker.host.worker.restarts >= 1
        assert b[0].worker.host.worker.restarts == 0 and all(e.restarts == 0 for e in b)  # untouched
        assert [e.state_hash() for e in envs] == hashes  # the crashed one rebuilt too
    finally:
        _close(envs)


def test_an_error_reply_to_open_costs_no_other_episode(shop):
    """A slot the child refuses to open (slot 0 is the child's own episode: an error reply, the
    child lives) does not take the other slots' state with it (only a crash does)."""
    a, b = Environment.open_hosted(shop, episodes=2, unsafe=UNSAFE)
    try:
        for e in (a, b):
            e.reset()
        assert a.call("update_email", {"user_id": "u1", "email": "a@x.org"}).ok
        host, generation = a.worker.host, a.worker.host.generation
        with pytest.raises(OpenRefused):
            EpisodeSlot(host, 0).fresh()
        assert host.generation == generation and host.worker.restarts == 0
        assert a.call("get_user", {"user_id": "u1"}).content["email"] == "a@x.org" and a.restarts == 0
    finally:
        _close((a, b))
