"""The runner holds glibc's allocator steady (jacbench.timing.allocator): a strategy's freed
buffers of a few MiB are reused from the heap instead of being mapped fresh, their pages
faulted in again, on every call; without it a job's time depended on the jobs before it."""

from __future__ import annotations

import resource

import pytest
import torch

import jacbench
from jacbench.models.map import Banded
from jacbench.timing.allocator import STEADY, hold_steady
from jacbench.timing.measure import torch_threads


def faults_per_call(call, calls: int = 10) -> float:
    """Minor page faults per call: pages the kernel handed the process afresh."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        call()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def test_a_strategys_buffers_are_reused_instead_of_mapped_fresh_on_every_call():
    """The map's banded float64 cell at N = M = 1024, folded forward mode: 6658-8160 page
    faults a call (13.6-16.8 ms) with glibc's own thresholds in a fresh process, 68-137
    (2.9-3.0 ms) held steady (2026-11-26, one core)."""
    if hold_steady() != STEADY:
        pytest.skip("the C library is not glibc")
    f = Banded(n_in=1024, n_out=1024).double()
    x = torch.randn(1024, dtype=torch.float64)
    with torch_threads(1):  # as a job is timed: other threads' heaps are theirs to keep
        prepared = jacbench.prepare(f, x, "jacfwd_folded", compile=False)
        faults_per_call(lambda: prepared(x))  # the heap settles (a worker's earlier tests)
        assert faults_per_call(lambda: prepared(x)) < 1000


def test_a_job_records_the_allocator_it_was_timed_under():
    from helpers.cli import compose_job
    from jacbench.core.registry import load_registry
    from jacbench.run.runner import execute

    result = execute(compose_job("timing=quick", "timing.memory=false"), load_registry())
    assert result.ok and result.allocator == hold_steady() != ""


def test_a_glibc_that_refuses_the_thresholds_is_recorded_as_such(monkeypatch):
    """Not as "not glibc": the row must say its allocator may have been glibc's own."""
    from jacbench.timing import allocator

    class Refusing:
        def mallopt(self, option: int, value: int) -> int:
            return 0

    monkeypatch.setattr(allocator, "_glibc", lambda: Refusing())
    assert hold_steady() == allocator.REFUSED and "glibc" in allocator.REFUSED
