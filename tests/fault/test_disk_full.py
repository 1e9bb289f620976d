"""A full disk during a run: the pipeline (real stages, scripted oracle endpoint) runs on a workspace in
a tiny tmpfs mounted in a private mount namespace (`unshare -m`, root); it must fail clearly (No space
left on device), leave nothing half-written under a final name, and after the disk grows, resume
to the same artifacts as a clean run. Skipped, with the reason, where namespaces or mounts are refused.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from tests.fault.pipeline import ROOT, compare


def _can_mount_tmpfs(tmp) -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot mount a tmpfs"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    p = subprocess.run(["unshare", "-m", "sh", "-c", f"mkdir -p {tmp}/m && mount -t tmpfs -o size=64k tmpfs {tmp}/m"],
                       capture_output=True, text=True)
    return None if p.returncode == 0 else f"cannot mount a tmpfs in a private mount namespace: {p.stderr.strip()}"


def test_full_disk_fails_clearly_leaves_nothing_half_written_and_resumes(clean_pipeline, tmp_path):
    reason = _can_mount_tmpfs(tmp_path)
    if reason:
        pytest.skip(reason)
    _, clean, _ = clean_pipeline
    small = random.choice(["48k", "96k", "160k", "240k"])  # the disk fills in a different stage each time
    out = tmp_path / "out.json"
    p = subprocess.run(["unshare", "-m", sys.executable, "-m", "tests.fault.diskfull", str(tmp_path / "mnt"), str(out),
                        small, "64m"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    full, grown = res["runs"]
    assert full["rc"] != 0 and full["enospc"], full  # a clear failure naming the full disk
    assert full["problems"] == [] and grown["problems"] == [], res["runs"]  # nothing half-written
    assert grown["rc"] == 0, grown
    snap = res["snapshot"]
    snap["sft"] = {int(k): v for k, v in snap["sft"].items()}
    snap["catalog"] = [tuple(r) for r in snap["catalog"]]
    assert compare(clean, snap) == []
