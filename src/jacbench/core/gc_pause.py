"""Python's cyclic garbage collector paused while torch builds its machinery (issue 29, 33).

torch's first ``torch.func`` call imports its compiler (dynamo, sympy), and a strategy that
traces or compiles makes many thousands of objects; the collector walks every live object
again at each full collection it triggers meanwhile. Paused, ``python -m jacbench`` started
6.9 -> 5.0 s beside a 4.6 s floor, and a fresh process's ``jacbench.prepare`` plus first call
on seed004 took 1.8 -> 1.5 CPU-s here.

Two uses: ``pause``/``resume`` around the command's start-up (resumed, with what start-up
made frozen as the gc docs advise for long-lived state, before anything is timed and once a
sweep is open), and
``paused``/``first_call_paused`` around a preparation's first call and its later builds in a
library caller's process (the collector is given back as it was found).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
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


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block, then as it was (nested and threaded uses included:
    only the block that turned it off turns it on)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def first_call_paused(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, its first call run under ``paused()`` (where torch imports its compiler and
    a strategy traces or compiles); later calls go straight through."""
    fresh = [True]

    def call(*args: object) -> T:
        if fresh[0]:
            fresh[0] = False
            with paused():
                return fn(*args)
        return fn(*args)

    return call
