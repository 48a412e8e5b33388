"""The processor a time was measured on: part of a row's provenance and of a remembered
decision's key (a decision timed on another processor is not this one's)."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def cpu_model() -> str:
    """The processor's name (/proc/cpuinfo on Linux). Not ``platform.processor()``: on Linux
    it runs ``uname -p`` in a subprocess and names only the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()
