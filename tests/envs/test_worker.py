"""The sandbox worker's start: what its process imports (every domain of a build starts one)."""

from __future__ import annotations

import json
import subprocess
import sys

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
