"""The garbage collector paused while ``python -m jacbench`` starts (issue 29): resumed, with
start-up's objects frozen, before a job is timed, and after a job that stopped earlier."""

from __future__ import annotations

import gc

import pytest

from helpers.cli import compose_job
from jacbench.core import startup_gc
from jacbench.core.registry import load_registry
from jacbench.run.runner import execute


@pytest.fixture
def paused():
    """``startup_gc.pause()`` as the command does it; the collector restored afterwards."""
    startup_gc.pause()
    yield
    startup_gc.resume()
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
        startup_gc.resume()  # never paused by jacbench
        assert not gc.isenabled()
    finally:
        gc.enable()
