"""Python's cyclic garbage collector paused while ``python -m jacbench`` starts, and resumed
before anything is timed (issue 29).

Start-up (torch, dynamo's first import, Hydra; MLflow in the tracking helper) makes millions
of long-lived objects, and every full collection walks all of them again. On resuming, what
start-up made is frozen (``gc.freeze``: never walked again, as the gc docs advise for
long-lived start-up state) and the collector runs as usual for the jobs' own objects.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Resume what ``pause`` paused (a no-op otherwise: a library caller's choice stands)."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False
