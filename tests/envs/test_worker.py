"""The sandbox worker's start: what its process imports (every domain of a build starts one)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envs.sandbox import _library_names, _pyseccomp_path, worker_lib

HEAVY = ("hashlib", "shutil", "subprocess", "tempfile", "pathlib", "envs.state", "envs.store")


def _start_imports(libraries: dict[str, str]) -> dict:
    """Import envs.worker and pyseccomp as a worker's start does (-I -S, the worker's library
    folder), in a fresh interpreter; what ended up imported, and whether a filter still builds."""
    lib = worker_lib(_pyseccomp_path())
    code = (f"import sys, json; sys.path[:0] = [{str(lib)!r}]\n"
            "import envs.worker as w\n"
            f"w._import_pyseccomp({libraries!r})\n"
            "import pyseccomp, ctypes\n"
            "f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)\n"
            f"print(json.dumps({{'loaded': sorted(m for m in {HEAVY!r} if m in sys.modules),\n"
            "                   'stand_in_left': 'ctypes.util' in sys.modules or hasattr(ctypes, 'util')}))\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_worker_start_imports_no_build_side_or_find_library_modules():
    libraries = _library_names()
    assert libraries.get("c") and libraries.get("seccomp"), libraries
    got = _start_imports(libraries)
    assert got["loaded"] == [], got  # the seed builder's oracle (hashlib) and ctypes.util's imports stay out
    assert got["stand_in_left"] is False  # the stand-in ctypes.util was for pyseccomp's import only


def test_unknown_library_names_fall_back_to_the_real_find_library():
    got = _start_imports({})
    assert "subprocess" in got["loaded"]  # the real ctypes.util (and ldconfig) found the libraries
    assert got["stand_in_left"] is True  # ... and stays imported, as any import leaves it


def test_module_state_sees_what_can_change_or_refuses():
    """envs.worker.module_state over a namespace as tools.py's run leaves it: functions it defined
    (their code, defaults, keyword defaults, attributes), what it imported and frozen values are
    followed; a list, a dict, an instance, a class or a closure it made, a mutable default, are
    not (such a module runs again before every episode)."""
    from envs.worker import MODULE, module_state, module_unchanged

    def run(src: str) -> dict:
        ns = {"__name__": MODULE}
        exec(compile(src, "tools.py", "exec"), ns)  # noqa: S102 - our own fixture source
        return ns

    clean = run("import json\nfrom math import sqrt\nLIMIT = 3\nNAMES = ('a', ('b', 1.5))\n"
                "def f(db, x=1, *, y='z'):\n    return x\n")
    state = module_state(clean)
    assert state is not None and module_unchanged(clean, state)
    for change in ("LIMIT = 4", "f.seen = 1", "f.__defaults__ = (2,)", "f.__kwdefaults__['y'] = 'w'",
                   "f.__code__ = (lambda db: 0).__code__", "EXTRA = 1", "del NAMES", "json = None"):
        ns = dict(clean, f=run("def f(db, x=1, *, y='z'):\n    return x\n")["f"])
        state = module_state(ns)
        exec(change, ns)  # noqa: S102
        assert not module_unchanged(ns, state), change
    for src in ("SEEN = []", "TABLE = {'a': 1}", "class C:\n    n = 0", "def f(db, x=[]):\n    return x",
                "def f(db, *, x=[]):\n    return x", "def g():\n    n = 0\n    def f(db):\n        return n\n    return f\nf = g()",
                "S = frozenset([1]) | {2}\nX = object()", "class S(str):\n    pass\nV = S('a')"):
        assert module_state(run(src)) is None, src


def test_empty_size_only_where_a_folder_size_counts_its_entries(tmp_path):
    """empty_size: on tmpfs (a folder's size counts its entries) the size an empty folder reports,
    the probe it made gone; on a file system whose folders keep their size (ext4's block), None:
    there every episode empties scratch by walking it."""
    import os
    import tempfile

    from envs.worker import empty_size

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        size = empty_size(shm)
        assert size is not None and size == os.stat(shm).st_size and os.listdir(shm) == []
        open(os.path.join(shm, "f"), "w").close()
        assert os.stat(shm).st_size != size
    blocky = tmp_path / "blocky"
    blocky.mkdir()
    if os.statvfs(tmp_path).f_bsize and os.stat(blocky).st_size >= 4096:  # ext4 and the like
        assert empty_size(str(blocky)) is None and os.listdir(blocky) == []
