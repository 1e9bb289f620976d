"""Run the pipeline on a workspace in a tiny tmpfs until the disk is full; check; grow it; resume.

    unshare -m python -m tests.fault.diskfull MOUNTPOINT OUT.json SIZE [SIZE ...]

Must run in a private mount namespace (`unshare -m`, as root): it mounts a tmpfs of the first
SIZE on MOUNTPOINT, runs the pipeline child there (tests/fault/pipeline.py, with its own oracle
endpoint) and expects it to fail with "No space left on device"; checks that nothing finished is
half-written (pipeline.integrity, with room on the disk, before anything else runs); then remounts with the next SIZE and resumes, and so on; the
last run must finish. The results go to OUT.json (outside the tmpfs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.fault.crash import child
from tests.fault.faulty_llm import FaultyLLM
from tests.fault.pipeline import integrity, snapshot


# how a full disk shows: the OS's ENOSPC, SQLite's SQLITE_FULL, or SQLite's I/O error on its WAL index
DISK_ERRORS = ("No space left on device", "ENOSPC", "database or disk is full", "disk I/O error")


def main() -> None:
    mnt, out, sizes = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    mnt.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={sizes[0]}", "tmpfs", str(mnt)], check=True)
    ws = mnt / "ws"
    runs = []
    with FaultyLLM(ws) as srv:
        for i, size in enumerate(sizes):
            if i:
                subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)
            log = mnt.parent / f"{mnt.name}.stages"
            t0 = time.time()
            p = child(ws, srv.url, log)
            stdout, stderr = p.communicate(timeout=900)
            lines = log.read_text().split("\n") if log.exists() else []
            stage = [ln.split()[0] for ln in lines if ln.strip()][-1:] or ["startup"]
            # checked with room on the disk again (SQLite needs to write its -shm file even to read a
            # WAL database) and before any other process touches the workspace
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
            runs.append({"size": size, "rc": p.returncode, "stage": stage[0], "seconds": round(time.time() - t0, 1),
                         "enospc": any(w in stderr for w in DISK_ERRORS),
                         "error_tail": next((ln for ln in reversed(stderr.strip().splitlines())
                                             if any(w in ln for w in DISK_ERRORS)), stderr.strip()[-300:])[:300]
                         if p.returncode else "",
                         **integrity(ws)})
    out.write_text(json.dumps({"runs": runs, "snapshot": snapshot(ws) if runs[-1]["rc"] == 0 else None}))
    subprocess.run(["umount", "-l", str(mnt)], check=False)


if __name__ == "__main__":
    main()
