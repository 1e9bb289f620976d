"""What both ends of the sandbox pipe share: the frame header and the spin-then-sleep read.

Frame: 8-byte header (json length, binary length, big-endian uint32) + compact JSON + optional
binary payload. Stdlib only: the sandbox worker imports it too.
"""

from __future__ import annotations

import os
import struct
import time

HEADER = struct.Struct(">II")


def spin_read(fd: int, n: int, spin_ns: int) -> bytes | None:
    """Read from a non-blocking fd, busy-waiting up to spin_ns; None if nothing came by then.

    Why: on these VMs waking a sleeping process costs 25-75 us (an idle vCPU halts, and its caches
    go cold), more than most tool calls take. A message that comes within the spin costs ~3 us of
    pipe round trip instead. Bounded, so a slow tool or an idle agent costs at most spin_ns of CPU."""
    end = time.perf_counter_ns() + spin_ns
    while True:
        try:
            return os.read(fd, n)
        except BlockingIOError:
            if time.perf_counter_ns() >= end:
                return None
