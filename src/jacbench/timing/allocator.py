"""glibc's allocator held steady while a job is timed.

glibc adapts its mmap and trim thresholds to what the process freed before, so whether a
buffer is mapped fresh or reused would depend on the jobs that ran earlier (docs/map.md).
The runner fixes both before each job and the row records it (``allocator``); the library
never changes this process-wide setting.
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
