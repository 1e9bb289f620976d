"""Environment.replay (verification's replay) on the shop fixture, through the real sandboxed worker."""

from __future__ import annotations

import pytest

from envs.episode import Environment
from envs.state import StateOracle
# the shop fixture's `shop` and `env` fixtures, and the sandbox mode those API tests run in
from tests.envs.test_episode import UNSAFE, build_shop, env, shop  # noqa: F401

EPISODES = [
    [("get_user", {"user_id": "u1"}), ("list_user_orders", {"user_id": "u1"})],  # reads only
    [("place_order", {"user_id": "u1", "product_id": "p3", "quantity": 1}), ("get_order", {"order_id": "o4"}),
     ("cancel_order", {"order_id": "o4"})],
    [("cancel_order", {"order_id": "o4"}), ("update_email", {"user_id": "u1", "email": "no-at-sign"})],  # failed writes
    [("nope", {}), ("get_user", {"user_id": 1}), ("get_user", '{"user_id": "u2"'),  # refused before the worker
     ("update_email", {"user_id": "u2", "email": "alan@turing.org"})],
    [],
]


def one_by_one(env: Environment, calls: list) -> tuple[list[str], str]:
    env.reset()
    texts = [env.call(n, a).text() for n, a in calls]
    return texts, env.state_hash()


def test_replay_equals_calls_one_by_one(env, shop):
    oracle = StateOracle(env.spec.tables, (shop / "seed.sqlite").read_bytes())
    seed_hash = oracle.hash(oracle.seed)
    want = [one_by_one(env, calls) for calls in EPISODES]
    for fresh in (False, True):
        got = list(env.replay(EPISODES * 3, fresh=fresh))  # later episodes start from the seed again
        assert len(got) == len(EPISODES) * 3
        for (results, image), (texts, h) in zip(got, want * 3):
            assert [r.text() for r in results] == texts
            assert (oracle.hash(image) if image is not None else seed_hash) == h
        assert [img is None for _, img in got[:len(EPISODES)]] == [True, False, True, False, True]
    assert [r.ok for r in got[3][0]] == [False, False, False, True]


def test_call_after_replay_needs_a_reset(env):
    list(env.replay(EPISODES[:2]))
    assert "reset" in env.call("get_user", {"user_id": "u1"}).error
    env.reset()
    assert env.call("get_user", {"user_id": "u1"}).ok


def test_small_round_trips_give_the_same_results(env):
    big = [[r.text() for r in res] for res, _ in env.replay(EPISODES)]
    small = [[r.text() for r in res] for res, _ in env.replay(EPISODES, max_bytes=1)]  # one episode per trip
    assert big == small


def test_a_child_that_dies_mid_trip_is_replaced_and_the_trip_redone_one_episode_per_child(tmp_path):
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\n_get_user = get_user\n\n\n"
                                   "def get_user(db, user_id):\n    if user_id == 'kill':\n"
                                   "        import os\n        os._exit(3)\n    return _get_user(db, user_id)\n")
    with Environment.open(dest, unsafe=UNSAFE) as e:
        eps = [[("get_user", {"user_id": "u1"})], [("get_user", {"user_id": "kill"})],
               [("update_email", {"user_id": "u2", "email": "a@b.org"})]]
        got = list(e.replay(eps))
        assert got[0][0][0].ok and got[2][0][0].ok and got[2][1] is not None
        assert not got[1][0][0].ok and "crashed" in got[1][0][0].error
        assert e.restarts >= 1


@pytest.mark.skipif(UNSAFE, reason="scratch is a tmpfs of bubblewrap's")
def test_each_replayed_episode_starts_with_an_empty_scratch(tmp_path):
    """Episodes of one round trip share a child: scratch is emptied between them, checked with one
    stat of its size (a tmpfs folder's size counts its entries); what an episode leaves (a file, a
    folder tree, a file in a folder it then empties) is gone for the next, also in a fresh child."""
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + """

import os
_get_user = get_user


def get_user(db, user_id):
    seen = sorted(os.listdir('/scratch'))
    if user_id == 'u1':
        open('/scratch/left.txt', 'w').write('x')
    elif user_id == 'u2':
        os.makedirs('/scratch/a/b/c')
        open('/scratch/a/b/c/f', 'w').write('y')
    elif user_id == 'u3':
        os.mkdir('/scratch/d')
        open('/scratch/d/f', 'w').write('z')
        os.unlink('/scratch/d/f')
    return {**_get_user(db, user_id), 'seen': seen}
""")
    eps = [[("get_user", {"user_id": u}), ("get_user", {"user_id": "u1"})] for u in ("u1", "u2", "u3", "u1")]
    with Environment.open(dest, unsafe=UNSAFE) as e:
        for fresh in (False, True):
            got = [[r.content["seen"] if r.ok else r.error for r in res] for res, _ in e.replay(eps, fresh=fresh)]
            assert got == [[[], ["left.txt"]], [[], ["a"]], [[], ["d"]], [[], ["left.txt"]]], got


def test_module_globals_start_afresh_in_each_episode_patched_modules_do_not(tmp_path):
    """The trade Environment.replay makes by default: tools.py runs afresh for each episode, but a
    change tool code makes outside its module reaches later episodes of a shared child (so
    tasks.verify.replay confirms every disagreement in a fresh child)."""
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\nimport json\n_N = [0]\n"
                                   "_get_user = get_user\n\n\ndef get_user(db, user_id):\n    _N[0] += 1\n"
                                   "    json.seen = getattr(json, 'seen', 0) + 1\n"
                                   "    return {**_get_user(db, user_id), 'mine': _N[0], 'patched': json.seen}\n")
    with Environment.open(dest, unsafe=UNSAFE) as e:
        eps = [[("get_user", {"user_id": "u1"})]] * 3
        shared = [(res[0].content["mine"], res[0].content["patched"]) for res, _ in e.replay(eps)]
        fresh = [(res[0].content["mine"], res[0].content["patched"]) for res, _ in e.replay(eps, fresh=True)]
    assert shared == [(1, 1), (1, 2), (1, 3)] and fresh == [(1, 1)] * 3


# tools.py's module body counts its runs where they outlive a run (a stdlib module: process-wide);
# each case's get_user changes something of its own module and reports what it found (`mine`).
RUNS = "import json\njson.runs = getattr(json, 'runs', 0) + 1\n_get_user = get_user\n\n\n"
REPORT = "    return {**_get_user(db, user_id), 'mine': mine, 'runs': json.runs}\n"
MODULE_CHANGES = {
    "nothing": "def get_user(db, user_id):\n    mine = 1\n",
    "a global rebound": "_COUNT = 0\n\n\ndef get_user(db, user_id):\n    global _COUNT\n    _COUNT += 1\n"
                        "    mine = _COUNT\n",
    "an attribute set on a function": "def get_user(db, user_id):\n    get_user.calls = getattr(get_user, 'calls', 0) + 1\n"
                                      "    mine = get_user.calls\n",
    "a function's defaults": "def get_user(db, user_id, _seen=()):\n    get_user.__defaults__ = (_seen + (user_id,),)\n"
                             "    mine = len(_seen) + 1\n",
    "a function's keyword defaults, in place": "def get_user(db, user_id, *, _n=0):\n"
                                               "    get_user.__kwdefaults__['_n'] = _n + 1\n    mine = _n + 1\n",
    "a list it holds": "_SEEN = []\n\n\ndef get_user(db, user_id):\n    _SEEN.append(user_id)\n    mine = len(_SEEN)\n",
}


@pytest.mark.parametrize("change", list(MODULE_CHANGES))
def test_tools_py_runs_again_for_an_episode_only_when_its_module_changed(tmp_path, change):
    """A shared-child replay runs tools.py again before an episode only when the module no longer
    holds what it held after it ran (envs.worker.module_state): a global rebound, an attribute,
    defaults or keyword defaults set on one of its functions. Then the episode sees the module as a
    fresh child does; a module that nothing changed is not run again (one run for the round trip,
    the child's own); one holding what that check cannot see (a list) runs before every episode.
    Environment.restart's episodes see the module as fresh too."""
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\n" + RUNS + MODULE_CHANGES[change] + REPORT)
    eps = [[("get_user", {"user_id": "u1"})]] * 3
    with Environment.open(dest, unsafe=UNSAFE) as e:
        shared = [(res[0].content["mine"], res[0].content["runs"]) for res, _ in e.replay(eps)]
        fresh = [(res[0].content["mine"], res[0].content["runs"]) for res, _ in e.replay(eps, fresh=True)]
        e.reset()
        restarted = []  # Environment.restart (the scenario stage's walks) checks the module alike
        for _ in range(3):
            restarted.append(e.call("get_user", {"user_id": "u1"}).content["mine"])
            e.restart()
    assert fresh == [(1, 1)] * 3 and restarted == [1, 1, 1]
    runs = [1, 1, 1] if change == "nothing" else [1, 2, 3] if change != "a list it holds" else [2, 3, 4]
    assert shared == [(1, r) for r in runs]


def test_call_from_seed_starts_every_call_at_the_seed_and_answers_as_call_does(tmp_path):
    """The validation suite's try (Environment.call_from_seed): one call from the seed with the
    image after it, in the current child; a write's change does not reach the next call, errors
    read as call()'s, a child that dies or hangs is replaced and the call gets an error."""
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\n_get_user = get_user\n\n\n"
                                   "def get_user(db, user_id):\n    if user_id == 'kill':\n"
                                   "        import os\n        os._exit(3)\n    while user_id == 'hang':\n"
                                   "        pass\n    return _get_user(db, user_id)\n")
    with Environment.open(dest, unsafe=UNSAFE, time_limit=1.0) as e:
        oracle = e.state_oracle()
        seed = oracle.hash(oracle.seed)
        res, image = e.call_from_seed("update_email", {"user_id": "u1", "email": "new@example.org"})
        assert res.ok and res.content["email"] == "new@example.org" and oracle.hash(image) != seed
        res, image = e.call_from_seed("get_user", {"user_id": "u1"})
        assert res.ok and res.content["email"] != "new@example.org" and oracle.hash(image) == seed
        for name, args in [("update_email", {"user_id": "u1", "email": "no-at-sign"}), ("nope", {}),
                           ("get_user", {"user_id": 1}), ("get_user", {"user_id": "u9"})]:
            e.reset()
            want = e.call(name, args).text()
            got, image = e.call_from_seed(name, args)
            assert got.text() == want and oracle.hash(image) == seed
        for bad in ("kill", "hang"):
            got, image = e.call_from_seed("get_user", {"user_id": bad})
            assert not got.ok and oracle.hash(image) == seed, got.error
        assert "crashed" in e.call_from_seed("get_user", {"user_id": "kill"})[0].error
        assert "reset" in e.call("get_user", {"user_id": "u1"}).error  # the environment's own episode is over
        e.reset()
        assert e.call("get_user", {"user_id": "u1"}).ok


@pytest.mark.parametrize("first_reads", [True, False])
def test_an_episode_sees_sqlite_counters_of_its_own_connection_only(tmp_path, first_reads):
    """SQLite's changes(), last_insert_rowid() and total_changes() belong to the connection: a
    shared-child replay, which keeps its connection from one episode to the next, must not carry
    one episode's into the next (a fresh child starts at 0). Either the first episode reads them
    (a connection of its own for each episode from then on), or they are first read on a
    connection an earlier episode wrote on (that episode runs again, on a connection of its own)."""
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\n_get_user = get_user\n\n\n"
                                   "def get_user(db, user_id):\n"
                                   "    c = db.query('SELECT changes() AS c, last_insert_rowid() AS r, total_changes() AS t')\n"
                                   "    return {**_get_user(db, user_id), 'counters': c[0]}\n")
    write = [("place_order", {"user_id": "u1", "product_id": "p3", "quantity": 1})]
    read = [("get_user", {"user_id": "u1"})]
    eps = [write + read, read, write, read, read] if first_reads else [write, write + read, read, write, read]
    with Environment.open(dest, unsafe=UNSAFE) as e:
        shared = [[r.text() for r in res] for res, _ in e.replay(eps)]
        fresh = [[r.text() for r in res] for res, _ in e.replay(eps, fresh=True)]
        alone = [[[r.text() for r in res] for res, _ in e.replay([ep], fresh=True)][0] for ep in eps]
    assert shared == fresh == alone
    counters = [[r for r in res if "counters" in r] for res in shared]
    zero = '"counters": {"c": 0, "r": 0, "t": 0}'
    assert [bool(c) and zero not in c[0] for c in counters] == [ep[0] == write[0] and len(ep) > 1 for ep in eps]
    assert all(zero in c[0] for c, ep in zip(counters, eps) if c and len(ep) == 1)


def test_what_tool_code_sets_on_the_connection_does_not_reach_the_next_episode(tmp_path):
    """The shared child keeps its connection across episodes: a row or text factory, or an
    isolation level, that tool code set is back to a new connection's before the next episode."""
    dest = build_shop(tmp_path / "shop")
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\nimport sqlite3\n_get_user = get_user\n\n\n"
                                   "def get_user(db, user_id):\n"
                                   "    seen = [repr(db.conn.row_factory), repr(db.conn.text_factory), repr(db.conn.isolation_level)]\n"
                                   "    db.conn.row_factory, db.conn.text_factory = sqlite3.Row, bytes\n"
                                   "    db.conn.isolation_level = 'DEFERRED'\n"
                                   "    return {**_get_user(db, user_id), 'seen': seen}\n")
    write = [("place_order", {"user_id": "u1", "product_id": "p3", "quantity": 1})]
    read = [("get_user", {"user_id": "u2"})]
    eps = [read, write, read, read]
    with Environment.open(dest, unsafe=UNSAFE) as e:
        shared = [[r.text() for r in res] for res, _ in e.replay(eps)]
        fresh = [[r.text() for r in res] for res, _ in e.replay(eps, fresh=True)]
    assert shared == fresh
    assert all('"seen": ["None", "<class \'str\'>", "None"]' in res[0] for res, ep in zip(shared, eps) if ep == read)
