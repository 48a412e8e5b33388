"""The garbage collector paused while ``python -m jacbench`` starts (issue 29): resumed, with
start-up's objects frozen, before a job is timed, and after a job that stopped earlier; and
around a prepared Jacobian's first call in a library caller's process, then given back."""

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


def test_a_prepared_jacobians_first_call_runs_with_the_collector_paused():
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x.sin()

    x = torch.ones(3)
    prep = jacbench.prepare(f, x, "jacrev")
    seen.clear()  # prepare itself evaluated f once
    prep(x)
    prep(x)
    assert seen == [False, True]  # torch imports its compiler there: not walked meanwhile
    assert gc.isenabled()


def test_a_pause_inside_a_pause_leaves_the_collector_to_the_outer_one():
    with gc_pause.paused():
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
