"""glibc's allocator tuned for a daemon that runs for months: few arenas, free pages returned.

A long-running daemon's memory grows in native heap, not in Python objects, unless told
otherwise. glibc gives each thread that allocates concurrently its own arena (up to 8 per core);
the tick, the minute rollup, the scrapes and the /metrics server run on rotating pool threads,
so each arena they touch keeps megabytes of fragmented, mostly free heap, and the number of
arenas touched grows with uptime. Two arenas bound that (the daemon's threads rarely allocate at
the same instant, so contention is not measurable), and ``malloc_trim`` after the minute job
hands the freed tops and holes of every arena back to the kernel.

Both are no-ops off glibc (musl, macOS); ``MALLOC_ARENA_MAX`` in the environment wins, as glibc
already applied it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from functools import cache

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # from glibc's malloc.h
M_MMAP_THRESHOLD = -3
ARENAS = 2
# glibc starts at 128 KiB and raises the threshold each time a mapped block is freed, up to
# 32 MiB: after a few large scrape bodies every later one lands on the heap and fragments it.
# Setting it fixes it where it starts, so large, short-lived buffers are mapped and unmapped.
MMAP_THRESHOLD = 128 * 1024


@cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 (glibc has both; musl has neither)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas; call before the daemon starts its threads.
    True when applied."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    applied = bool(libc.mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(arenas)))
    if not applied:
        log.debug("mallopt(M_ARENA_MAX) refused; glibc's default arenas stay")
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(MMAP_THRESHOLD))
    return applied


def trim() -> bool:
    """Give free heap pages back to the kernel; True when some were released."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(ctypes.c_size_t(0)))
