"""auto remembers what it decided across processes (issue 33): the next prepare of the same
problem skips the calibration; a changed function, dtype or torch version decides again; a
wrong remembered choice is caught on its first call; and the opt-outs write nothing."""

from __future__ import annotations

import json

import pytest
import torch

import jacbench
import jacbench.strategies.auto as auto_module
from jacbench.core import decisions

OPTIONS = {"compile": False}


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.sin(x) * x[0], x**2])


def g(x: torch.Tensor) -> torch.Tensor:  # the same name below, other code
    return torch.cat([torch.cos(x) * x[0], x**2])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(decisions.ENV, str(tmp_path))
    calibrations = []
    real = auto_module.calibrate

    def counted(problem, opts):
        calibrations.append(problem.name)
        return real(problem, opts)

    monkeypatch.setattr(auto_module, "calibrate", counted)
    return tmp_path / "auto", calibrations


def test_the_second_prepare_reuses_the_first_ones_decision(cache):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    first = jacbench.prepare(f, x, **OPTIONS)
    assert first.info.decided_by == "calibrated" and len(list(folder.glob("*.json"))) == 1
    second = jacbench.prepare(f, x, **OPTIONS)
    assert second.info.decided_by == "remembered" and len(calibrations) == 1
    assert second.info.chosen_strategy == first.info.chosen_strategy
    assert torch.allclose(second(x), torch.func.jacfwd(f)(x))


def test_changed_code_dtype_or_torch_version_decide_again(cache, monkeypatch):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, **OPTIONS)
    other = g
    other.__name__ = other.__qualname__ = "f"  # same name, other code
    assert jacbench.prepare(other, x, **OPTIONS).info.decided_by == "calibrated"
    assert jacbench.prepare(f, x.float(), **OPTIONS).info.decided_by == "calibrated"
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "calibrated"
    assert len(calibrations) == 4 and len(list(folder.glob("*.json"))) == 4


def test_a_wrong_remembered_choice_is_caught_on_its_first_call(cache):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, **OPTIONS)
    (entry,) = folder.glob("*.json")
    # a tampered entry: the negative control that sums the rows (seed003's mistake)
    entry.write_text(json.dumps({"strategy": "naive_single_grad", "options": {}}))
    prep = jacbench.prepare(f, x, **OPTIONS)
    assert prep.info.decided_by == "calibrated" and len(calibrations) == 2
    assert torch.allclose(prep(x), torch.func.jacfwd(f)(x))
    assert json.loads(entry.read_text())["strategy"] == prep.info.chosen_strategy


@pytest.mark.parametrize("off", ["env", "option"])
def test_remembering_turned_off_writes_nothing(cache, monkeypatch, off):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    if off == "env":
        monkeypatch.setenv(decisions.ENV, "")
    options = {**OPTIONS, "cache": off != "option"}
    for _ in range(2):
        assert jacbench.prepare(f, x, **options).info.decided_by == "calibrated"
    assert len(calibrations) == 2 and not folder.exists()


def test_a_job_records_how_auto_decided(cache):
    from helpers.cli import compose_job
    from jacbench.core.registry import load_registry
    from jacbench.run.runner import execute

    cfg = compose_job("strategy=auto", "strategy.compile=false", "timing=quick")
    results = [execute(cfg, load_registry()) for _ in range(2)]
    assert [r.decided_by for r in results] == ["calibrated", "remembered"]
    assert results[0].chosen_strategy == results[1].chosen_strategy
    assert all(r.ok and r.within_tol for r in results)


def test_calibration_counts_the_work_not_the_wait():
    """Issue 33: timed by wall clock on a loaded machine, auto once chose grads_batched at
    28x JAX. A candidate descheduled by another process waits without using CPU: here one
    that sleeps 3 ms a call against one that computes for about 1 ms."""
    import time

    from jacbench.strategies.auto import _seconds_per_call
    from jacbench.timing.measure import torch_threads

    def waiting(x):
        time.sleep(0.003)
        return x

    def working(x):
        end = time.process_time() + 0.001
        while time.process_time() < end:
            pass
        return x

    x = torch.zeros(3)
    with torch_threads(1):  # one thread: CPU time is what a call costs
        waits, works = _seconds_per_call([waiting, working], x, budget=0.1)
    assert waits < 0.0005 < works < 0.01  # by wall clock the sleeper would be the slower


def test_with_several_threads_calibration_times_what_the_user_waits():
    """A call on two threads costs their summed CPU time but returns in about half: there
    the wall clock decides, or auto would pass over a candidate that uses the cores well."""
    import time

    from jacbench.timing.interleaved import calibration_clock
    from jacbench.timing.measure import torch_threads

    with torch_threads(1):
        assert calibration_clock() is time.process_time
    with torch_threads(2):
        assert calibration_clock() is time.perf_counter
