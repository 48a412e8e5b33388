"""The garbage collector paused while ``python -m jacbench`` starts (issue 29): resumed, with
start-up's objects frozen, before a job is timed, and after a job that stopped earlier; the
library never touches it."""

from __future__ import annotations

import gc

import pytest
import torch

import jacbench
from jacbench.core import gc_pause


@pytest.fixture
def paused():
    """``gc_pause.pause()`` as the command does it; the collector restored afterwards."""
    gc_pause.pause()
    yield
    gc_pause.resume()
    gc.unfreeze()
    gc.enable()


def test_a_collector_the_caller_disabled_stays_disabled():
    gc.disable()
    try:
        gc_pause.resume()  # never paused by jacbench
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_library_leaves_the_collector_alone():
    """Issue 45: the library changes no process-wide setting behind its caller's back; the
    command pauses the collector for its own start-up only."""
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x.sin()

    x = torch.ones(3)
    for strategy, options in (("jacrev", {}), ("jacfwd_folded", {"compile": False})):
        prep = jacbench.prepare(f, x, strategy, **options)  # a trace, for the folded one
        prep(x)
        prep(x)
    assert len(seen) > 4 and all(seen)
    assert gc.isenabled()
