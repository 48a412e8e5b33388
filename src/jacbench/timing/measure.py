"""Timing and memory of a prepared Jacobian callable: torch.utils.benchmark for the steady
state, the first call (setup plus first execution) timed apart, and peak memory
(``peak_memory``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch.utils import benchmark

from jacbench.core.interleaved import finished
from jacbench.core.interrupt import check as check_interrupt
from jacbench.core.prepared import Prepared
from jacbench.core.torch_internals import profiled_allocations
from jacbench.timing.config import TimingConfig
from jacbench.timing.rule import MIN_BLOCKS, median_interval

log = logging.getLogger("jacbench")
LONG_TIMING_S = 5.0  # a timing this long says so first: a user then knows the job is alive
MAX_RUN_FACTOR = 3.0  # a noisy timing goes on for at most this many times min_run_time
K = TypeVar("K", bound=Hashable)  # what names the calls timed side by side


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


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for a block, then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
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
    finished(device)
    start = time.perf_counter()
    prep = prepare()
    value = prep(x)
    finished(device)
    return FirstCall(prep, value, time.perf_counter() - start)


@dataclass(frozen=True)
class Timing:
    """Steady-state time of one call (``Result`` columns of the same names), with each timed
    block's per-call time and the machine's load."""

    time_median_s: float
    time_iqr_s: float
    n_timed: int
    timing_warning: str  # torch.utils.benchmark's spread warning, "" when there is none
    n_blocks: int
    time_ci_low_s: float  # confidence interval of the median (jacbench.timing.rule)
    time_ci_high_s: float
    time_blocks_s: list[float]  # wall time per call, one value per timed block
    cpu_blocks_s: list[float]  # process CPU time per call in the same blocks
    cpu_median_s: float  # CPU time per call: what compare reads, as load hardly moves it
    cpu_ci_low_s: float
    cpu_ci_high_s: float
    thread_cpu_blocks_s: list[float]  # the timed thread's own CPU time per call, same blocks
    thread_cpu_median_s: float
    thread_cpu_ci_low_s: float
    thread_cpu_ci_high_s: float
    cpu_wall_ratio: float  # CPU / wall over the timed blocks: well below threads = contention
    load_avg_1m: float  # the machine's 1-minute load average at the end of timing


def spread_warning(m: benchmark.Measurement) -> str:
    """torch.utils.benchmark's spread warning (IQR above 10% of the median), in its words."""
    if m.meets_confidence():
        return ""
    why = (
        "This could indicate system fluctuation."
        if m.meets_confidence(0.25)
        else "This suggests significant environmental influence."
    )
    return f"Interquartile range is {100 * m.iqr / m.median:.1f}% of the median measurement. {why}"


def _clocks() -> tuple[float, float, float]:
    """Wall, process CPU and this thread's CPU seconds now."""
    return time.perf_counter(), time.process_time(), time.thread_time()


class _WallAndCpu:
    """The timer handed to torch.utils.benchmark: wall time, with the process's and the
    thread's CPU time of each block (timeit reads the timer twice per block) noted by the
    block's wall time."""

    def __init__(self) -> None:
        self.cpu_of_block: dict[float, tuple[float, float]] = {}
        self._start: tuple[float, float, float] | None = None

    def __call__(self) -> float:
        now = _clocks()
        if self._start is None:
            self._start = now
        else:
            wall, cpu, own = (end - begin for end, begin in zip(now, self._start, strict=True))
            self.cpu_of_block[wall] = (cpu, own)
            self._start = None
        return now[0]


def time_steady_state(prep: Prepared, x: torch.Tensor, timing: TimingConfig) -> Timing:
    """torch.utils.benchmark's ``adaptive_autorange`` (at most ``MAX_RUN_FACTOR`` x
    ``min_run_time``), topped up to ``MIN_BLOCKS`` blocks so that every timing has a spread."""
    for _ in range(timing.warmup):
        prep(x)
    clock = _WallAndCpu()
    timer = benchmark.Timer(
        stmt="prep(x)", globals={"prep": prep, "x": x}, num_threads=timing.threads, timer=clock
    )
    if timing.min_run_time >= LONG_TIMING_S:
        log.info("timing for at least %g s (Ctrl-C stops the job)", timing.min_run_time)
    m = timer.adaptive_autorange(
        callback=check_interrupt,  # type: ignore[arg-type]  # torch's stub: returns NoReturn
        min_run_time=timing.min_run_time,
        max_run_time=MAX_RUN_FACTOR * timing.min_run_time,
    )
    walls = list(m.raw_times)  # seconds per block of m.number_per_run calls
    while len(walls) < MIN_BLOCKS:
        check_interrupt()
        walls += timer.timeit(m.number_per_run).raw_times
    unknown = (float("nan"), float("nan"))
    cpus, owns = zip(*(clock.cpu_of_block.get(w, unknown) for w in walls), strict=True)
    return from_blocks(walls, list(cpus), m.number_per_run, m.task_spec, list(owns))


def from_blocks(
    walls: list[float],
    cpus: list[float],
    number: int,
    task: benchmark.utils.common.TaskSpec,
    own: list[float],
) -> Timing:
    """The timing record of blocks of ``number`` calls each: their wall, process CPU and
    timed thread's CPU seconds; each clock gives its per-call blocks, median and interval."""
    fields: dict[str, Any] = {}
    for clock, blocks in {"time": walls, "cpu": cpus, "thread_cpu": own}.items():
        per_call = [b / number for b in blocks]
        low, high = median_interval(per_call)
        fields |= {f"{clock}_blocks_s": per_call, f"{clock}_median_s": statistics.median(per_call)}
        fields |= {f"{clock}_ci_low_s": float(low), f"{clock}_ci_high_s": float(high)}
    m = benchmark.Measurement(number, walls, task)
    fields["time_median_s"] = float(m.median)  # torch's median, beside its IQR and warning
    return Timing(
        **fields,
        time_iqr_s=float(m.iqr),
        n_timed=int(number * len(walls)),
        timing_warning=spread_warning(m),
        n_blocks=len(walls),
        cpu_wall_ratio=float(sum(cpus) / sum(walls)),
        load_avg_1m=float(os.getloadavg()[0]),
    )


def side_by_side(
    calls: dict[K, Callable[[], object]], rounds: int = 2 * MIN_BLOCKS, block_s: float = 0.02
) -> dict[K, Timing]:
    """Time several calls interleaved in one process (A B A B ..., the order rotated each
    round), so that a change of the machine's load hits all of them alike; each block is
    ``block_s`` of calls (at least one), timed by wall, process CPU and thread CPU clock."""
    numbers = {}
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        numbers[name] = max(1, int(block_s / max(time.perf_counter() - start, 1e-9)))
    spent: dict[K, tuple[list[float], ...]] = {name: ([], [], []) for name in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            check_interrupt()
            begun = _clocks()
            for _ in range(numbers[name]):
                calls[name]()
            for blocks, end, begin in zip(spent[name], _clocks(), begun, strict=True):
                blocks.append(end - begin)
    task = benchmark.utils.common.TaskSpec("side by side", "")
    return {
        name: from_blocks(walls, cpus, numbers[name], task, owns)
        for name, (walls, cpus, owns) in spent.items()
    }


@dataclass(frozen=True)
class Memory:
    """Peak memory of one call (``Result`` columns of the same names)."""

    peak_mem_bytes: int
    memory_method: str


MEMORY_METHODS = {"cuda": "cuda_max_allocated", "cpu": "cpu_profiler_allocations"}


def measure_memory(prep: Prepared, x: torch.Tensor, device: torch.device) -> Memory:
    return Memory(peak_memory(lambda: prep(x), device), MEMORY_METHODS[device.type])


def peak_memory(jac: Callable[[], torch.Tensor], device: torch.device) -> int:
    """Peak bytes allocated above the starting level during one call, the result included:
    ``torch.cuda.max_memory_allocated`` on CUDA; on CPU the running sum of the profiler's
    allocation and free events (tensor storage only, what a strategy controls)."""
    if device.type == "cuda":
        finished(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = jac()
        finished(device)
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
    events = profiled_allocations(prof)
    if events is None:
        raise RuntimeError("torch.profiler recorded no results: the peak memory is unknown")
    level = peak = 0
    for _, nbytes in sorted(events, key=lambda event: event[0]):  # in time order
        level += nbytes
        peak = max(peak, level)
    return int(peak)
