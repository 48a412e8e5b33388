"""Seconds per call of several callables, timed in interleaved rounds by CPU time.

auto's calibration and the per-call benchmarks use it. Timed by wall clock one after the
other, a change of the machine's load lands on one candidate only: interleaving spreads it
over all candidates, and CPU time on one thread does not grow when another process takes
the core. torch.utils.benchmark times by wall clock only and one statement at a time, hence
this.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from jacbench.core.interrupt import check as check_interrupt

ROUNDS = 5  # each callable timed once per round
CPU = torch.device("cpu")


def calibration_clock(device: torch.device = CPU) -> Callable[[], float]:
    """CPU time where torch computes on one thread: it does not grow when another process
    takes the core. With several threads a call's CPU time is their sum, not how long the
    user waits, and on an accelerator a call only queues its kernels: there the wall clock,
    read after the device finished (``finished``), while interleaving spreads the load's
    changes."""
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.process_time
    return time.perf_counter


def finished(device: torch.device) -> None:
    """Wait until ``device`` ran the kernels queued so far (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(
    calls: list[Callable[[], object]],
    budget: float,
    rounds: int = ROUNDS,
    device: torch.device = CPU,
) -> list[float]:
    """Each callable's median time per call over ``rounds`` interleaved rounds, spending
    about ``budget`` seconds on each. The first half of each block runs untimed: a callable's
    first calls after another's are slower while it refills the caches the other used, and
    blocks timed whole would rank a callable by its neighbour's footprint."""
    clock, per_block = calibration_clock(device), budget / rounds
    sizes = []
    for call in calls:  # calls per block, from one warm call
        finished(device)
        start = clock()
        call()
        finished(device)
        sizes.append(max(1, min(1000, int(per_block / max(clock() - start, 1e-6)))))
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(rounds):
        for k, call in enumerate(calls):
            warm = sizes[k] // 2
            for _ in range(warm):
                call()
            finished(device)
            start = clock()
            for _ in range(sizes[k] - warm):
                call()
            finished(device)
            times[k].append((clock() - start) / (sizes[k] - warm))
            check_interrupt()
    return [statistics.median(t) for t in times]
