"""Process-wide settings for a long-running proxy: the open-file limit, the event loop, the allocator
and the collector.

The commands call these once before serving; nothing here builds or holds a part of the proxy.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
from collections.abc import Callable
from contextlib import suppress

from proxy.logs import get_logger

DESCRIPTORS_SPARE = 256
"""Descriptors kept beyond two per client connection: listeners, the capture, logs, admin clients."""


def fit_descriptor_limit(connections: int, held_upstream: int = 0) -> int:
    """Raise the soft open-file limit so `connections` clients (and an upstream socket each) fit,
    with `held_upstream` upstream connections more that outlive their clients' requests (a parked
    MRTR continuation's call, an upstream session's GET stream).

    Only as far as the hard limit allows; short of it, a warning names `max_client_connections`,
    since past the limit new clients would be reset instead of answered 503. Returns the soft limit.
    """
    wanted = 2 * connections + held_upstream + DESCRIPTORS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if raised > soft:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft < wanted:
        get_logger().warning(
            "descriptor_limit_low",
            open_files=soft,
            needed=wanted,
            hint=f"max_client_connections ({connections}) needs about {wanted} open files"
            + (f" with {held_upstream} held upstream connections" if held_upstream else "")
            + "; lower it or raise the limit (ulimit -n), or clients past the limit are reset instead "
            "of answered 503",
        )
    return soft


GC_THRESHOLD = 10_000
"""Net new container objects between young-generation collections (CPython's default is 700)."""


def use_fast_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop factory when uvloop is installed (cheaper I/O per request), else None.

    A factory for `asyncio.Runner`, not a global policy, so nothing else in the process changes loop.
    """
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


MMAP_THRESHOLD = 1024 * 1024
"""Allocations of this many bytes or more get pages of their own from the allocator (glibc)."""
_M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number for the mmap threshold (malloc.h)."""


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold, so the memory of a big body goes back to the system once it is freed.

    glibc gives an allocation of 128 KiB or more pages of its own, then, the first time it frees
    one, raises that threshold to the freed size (up to 32 MiB): from then on every big body lands in
    the heap, which the process keeps at its peak after a burst, so a second burst of big bodies
    grows the RSS past the first. A fixed threshold keeps each big body in pages that are unmapped
    when it is freed; smaller allocations (read chunks, messages) stay in the heap they reuse. Set
    `MALLOC_MMAP_THRESHOLD_` to choose another threshold; returns whether the threshold was set.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None:
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def tune_gc() -> None:
    """Collector settings for a long-running proxy; call once, after start-up imports, before serving.

    Every exchange leaves its chain in the store, so the heap holds a large, slowly turning population
    that CPython's default thresholds scan again and again (about a tenth of the CPU under load, and
    pauses of 100+ ms). Freezing what start-up built takes it out of every scan; a higher young
    threshold collects when the heap really grows, not on every short burst of allocations.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
