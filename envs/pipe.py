"""What both ends of the sandbox pipe share: the frame header and the spin-then-sleep read.

Frame: 24-byte header (json length, binary length: big-endian uint32; a 16-byte nonce) + compact
JSON + optional binary payload. The parent puts a fresh random nonce on every request and accepts
only a reply that echoes it: tool code runs after the request was read and never holds the nonce
in anything it can name, so a frame it writes itself is rejected (and the call blamed) instead of
being taken for the worker's reply. Stdlib only: the sandbox worker imports it too.
"""

from __future__ import annotations

import os
import re
import struct
import time

HEADER = struct.Struct(">II16s")
NO_NONCE = bytes(16)  # the start-up report, sent before any tool code exists
OK_BODY = b'{"ok":true}'  # the reply to almost every call: sent pre-encoded, read without a JSON parse
# A tool's result is read with json.loads (recursive) in the caller, maybe deep in its own stack:
# the worker refuses results nested deeper than this.
MAX_NESTING = 100


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_BRACKETS_ONLY = (bytes.maketrans(b"{}", b"[]"), bytes(b for b in range(256) if b not in b"[]{}"))


def too_deep(text: bytes, limit: int = MAX_NESTING) -> bool:
    """Do arrays and objects nest deeper than `limit` in this JSON text? The text, not the value it
    was encoded from, is what the caller's json.loads recurses into. Strings are dropped, the
    brackets kept alone, and each pass removes the innermost pairs (one level): at most `limit`
    passes at C speed, where walking a decoded result of thousands of rows in Python took ms."""
    brackets = _STRING.sub(b"", text).translate(*_BRACKETS_ONLY)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


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


def spin_readinto(fd: int, view: memoryview, spin_ns: int) -> int | None:
    """spin_read into a preallocated buffer (no copy, no reassembly): bytes read, 0 at EOF, None
    if nothing came within spin_ns."""
    end = time.perf_counter_ns() + spin_ns
    while True:
        try:
            return os.readv(fd, (view,))
        except BlockingIOError:
            if time.perf_counter_ns() >= end:
                return None
