"""Python's cyclic garbage collector paused while torch builds its machinery (issue 29, 33).

torch's first ``torch.func`` call imports its compiler (dynamo, sympy), and a strategy that
traces or compiles makes many thousands of objects; the collector walks every live object
again at each full collection it triggers meanwhile. Paused, ``python -m jacbench`` started
6.9 -> 5.0 s beside a 4.6 s floor, and a fresh process's ``jacbench.prepare`` plus first call
on seed004 took 1.8 -> 1.5 CPU-s here.

``pause``/``resume`` around the command's start-up (resumed, with what start-up made frozen
as the gc docs advise for long-lived state, before anything is timed and once a sweep is
open). The library (``jacbench.prepare``) leaves the collector to its caller (issue 45):
pausing it around a first call changed a process-wide setting behind the caller's back to
save, once per process, the collections during torch's lazy import of dynamo (a fresh
process's prepare plus first call on seed004's residual: 0.87-1.09 CPU-s paused, 1.42-1.54
not, ``scripts/library_overhead.py``).
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
