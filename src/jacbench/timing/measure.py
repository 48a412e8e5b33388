"""Timing and memory of a prepared Jacobian callable.

Timing uses torch.utils.benchmark (warm-up, block-size calibration, accelerator sync, median
and IQR). The first call (setup plus first execution) is timed apart. Peak memory comes from
the CUDA allocator on GPU; on CPU from the profiler's allocation events (see ``peak_memory``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils import benchmark

from jacbench.core.interrupt import check as check_interrupt
from jacbench.core.prepared import Prepared
from jacbench.timing.config import TimingConfig

log = logging.getLogger("jacbench")
LONG_TIMING_S = 5.0  # a timing this long says so first: a user then knows the job is alive


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the duration, then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class FirstCall:
    """Setup plus the first execution; ``value`` is that first Jacobian."""

    prep: Prepared
    value: torch.Tensor
    seconds: float


def first_call(prepare: Callable[[], Prepared], x: torch.Tensor, device: torch.device) -> FirstCall:
    """Setup (vmap tracing, compilation, identity matrices...) plus the first execution."""
    synchronize(device)
    start = time.perf_counter()
    prep = prepare()
    value = prep(x)
    synchronize(device)
    return FirstCall(prep, value, time.perf_counter() - start)


@dataclass(frozen=True)
class Timing:
    """Steady-state time of one call (``Result`` columns of the same names)."""

    time_median_s: float
    time_iqr_s: float
    n_timed: int
    timing_warning: str  # torch.utils.benchmark's spread warning, "" when there is none


def spread_warning(measurement: benchmark.Measurement) -> str:
    """torch.utils.benchmark's own warning (IQR above 10% of the median), on one line."""
    if not measurement.has_warnings:
        return ""
    return " ".join(" ".join(measurement._warnings).replace("WARNING:", "").split())


def time_steady_state(prep: Prepared, x: torch.Tensor, timing: TimingConfig) -> Timing:
    for _ in range(timing.warmup):
        prep(x)
    timer = benchmark.Timer(
        stmt="prep(x)", globals={"prep": prep, "x": x}, num_threads=timing.threads
    )
    if timing.min_run_time >= LONG_TIMING_S:
        log.info("timing for at least %g s (Ctrl-C stops the job)", timing.min_run_time)
    m = timer.blocked_autorange(callback=check_interrupt, min_run_time=timing.min_run_time)
    n_timed = int(m.number_per_run * len(m.raw_times))
    return Timing(float(m.median), float(m.iqr), n_timed, spread_warning(m))


@dataclass(frozen=True)
class Memory:
    """Peak memory of one call (``Result`` columns of the same names)."""

    peak_mem_bytes: int
    memory_method: str


MEMORY_METHODS = {"cuda": "cuda_max_allocated", "cpu": "cpu_profiler_allocations"}


def measure_memory(prep: Prepared, x: torch.Tensor, device: torch.device) -> Memory:
    return Memory(peak_memory(lambda: prep(x), device), MEMORY_METHODS[device.type])


def peak_memory(jac: Callable[[], torch.Tensor], device: torch.device) -> int:
    """Peak bytes allocated above the starting level during one call, the result included.

    CUDA: ``torch.cuda.max_memory_allocated`` (the caching allocator's own count of live
    tensor bytes). CPU: the running sum of the profiler's allocation and free events; this
    counts tensor storage only (not Python objects or allocator slack), which is what a
    strategy controls.
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = jac()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del out
        return int(peak)
    activities = [torch.profiler.ProfilerActivity.CPU]
    prof = torch.profiler.profile(activities=activities, profile_memory=True)
    with _quiet_stderr():  # kineto prints start/stop lines straight to fd 2
        prof.start()
    try:
        out = jac()
    finally:
        with _quiet_stderr():
            prof.stop()
    del out
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    level = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        level += e.nbytes()
        peak = max(peak, level)
    return int(peak)
