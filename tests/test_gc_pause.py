"""The garbage collector paused while ``python -m jacbench`` starts (issue 29): resumed, with
start-up's objects frozen, before a job is timed, and after a job that stopped earlier; the
library never touches it."""

from __future__ import annotations

import gc

import pytest
import torch
from omegaconf import OmegaConf

import jacbench
from helpers.cli import compose_job
from jacbench.core import gc_pause
from jacbench.core.registry import load_registry
from jacbench.run.runner import execute
from jacbench.run.sweep import lifecycle


@pytest.fixture
def paused():
    """``gc_pause.pause()`` as the command does it; the collector restored afterwards."""
    gc_pause.pause()
    yield
    gc_pause.resume()
    gc.unfreeze()
    gc.enable()


def test_collection_is_back_before_timing(paused):
    assert not gc.isenabled()
    seen = []
    job = compose_job("timing=quick", "timing.memory=false", "mlflow.enabled=false")
    result = execute(job, load_registry(), before_timing=lambda: seen.append(gc.isenabled()))
    assert result.ok, result.error_message
    assert seen == [True]
    assert gc.get_freeze_count() > 0  # what start-up made is never walked again


def test_a_job_that_stops_before_timing_resumes_collection(paused):
    job = compose_job("model=mlp", "model.hidden=-1", "mlflow.enabled=false")
    result = execute(job, load_registry(), before_timing=lambda: pytest.fail("timed"))
    assert not result.ok
    assert gc.isenabled()  # the next job of a sweep collects its garbage


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


def test_a_sweep_collects_once_it_is_open(paused, monkeypatch):
    """Under joblib or SLURM the sweep's own process runs no job (the runner would resume)."""
    monkeypatch.setattr(lifecycle, "open_sweep", lambda config: None)
    lifecycle.SweepCallback().on_multirun_start(OmegaConf.create({}))
    assert gc.isenabled()
