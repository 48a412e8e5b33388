"""glibc's allocator held steady while a job is timed.

glibc adapts its thresholds to what the process freed before (its dynamic mmap threshold,
and the trim threshold at twice it): a buffer of a few MiB is either mapped fresh from the
kernel on every call (and its pages faulted in again) or reused from the heap, depending on
which jobs ran earlier in the same process. At N = M = 1024 that decided a strategy's time
(the map's banded float64 cell, fresh processes, one core: ``jacfwd_folded`` 13.6-16.8 ms
a call with glibc's own thresholds, 2.91-2.98 ms held steady; docs/map.md), and so which
strategy won a cell and how far ``auto`` seemed to lose. The runner fixes both thresholds
before each job, so that a job's time does not depend on the jobs before it; each row
records the setting (``allocator``).

Only the benchmark's runner calls this: the library (``jacbench.prepare``) never changes a
process-wide setting of the user's process.
"""

from __future__ import annotations

import ctypes
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 64 << 20  # a buffer below this comes from the heap, above glibc's 32 MiB cap
TRIM_THRESHOLD = 256 << 20  # freed heap memory up to this stays in the process
STEADY = (
    f"glibc: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 20} MiB"
)
SYSTEM = "system (not glibc: as the process found it)"
REFUSED = "glibc: mallopt refused a threshold (its own, adaptive, may apply)"


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (it has ``mallopt``); None elsewhere (macOS, musl)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  # glibc's own symbol: musl has mallopt too
        return libc
    except (OSError, AttributeError):
        return None


def hold_steady() -> str:
    """Fix glibc's thresholds (idempotent) and say what the allocator is, for the row."""
    libc = _glibc()
    if libc is None:
        return SYSTEM
    if libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(
        M_TRIM_THRESHOLD, TRIM_THRESHOLD
    ):
        return STEADY
    return REFUSED  # glibc after all: the row must not say it is not
