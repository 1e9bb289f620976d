"""tree_cpu_s: the CPU a process tree used, by a live thread, an ended thread and a reaped child."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.results_io import tree_cpu_s

BUSY = "import time\nwhile time.thread_time() < 0.3: pass\n"
# a thread that works 0.3 s and ends, a child that works 0.3 s and is reaped, then a wait
PARENT = (f"import subprocess, sys, threading, time\nth = threading.Thread(target=exec, args=({BUSY!r},))\n"
          f"th.start(); th.join()\nsubprocess.run([sys.executable, '-c', {BUSY!r}])\n"
          "print('done', flush=True)\ntime.sleep(30)\n")


def test_ended_threads_and_reaped_children_count() -> None:
    p = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "done"
        own, tree = tree_cpu_s([p.pid], own_only=True), tree_cpu_s([p.pid])
        assert own >= 0.3 - 0.02  # the ended thread's (ticks; the parent's live thread adds a little)
        assert tree >= own + 0.3 - 0.02  # and the reaped child's
        time.sleep(0.2)
        assert abs(tree_cpu_s([p.pid]) - tree) < 0.05  # a sleeping tree uses none
    finally:
        p.kill()
        p.wait()
