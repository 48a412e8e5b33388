"""Whether this process waited for a core while it timed something: auto does not remember
a calibration made under load.

On Linux every thread's ``schedstat`` says how long it ran and how long it waited, runnable,
in a run queue; ran / (ran + waited) over the process's threads is the share of the time it
wanted a core that it had one, whatever the number of threads torch uses (CPU/wall per
thread, the rule for recorded rows, reads 0.5 for a small problem on two idle threads
where torch keeps one busy). Where ``schedstat`` cannot be read, that rule stands in
(``jacbench.timing.rule.contention``, the benchmark's reading of a recorded row). Either is
compared with ``CONTENDED`` (``contended``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

TASKS = Path("/proc/self/task")
# Below this share of its runnable time on a core, a timing waited for its core: its time is
# not its code's alone (auto does not remember it; a report does not rank by it).
CONTENDED = 0.85


def contended(share: float | None, device: str) -> float | None:
    """``share`` where it is below ``CONTENDED`` on a CPU, else None: on a GPU the process
    also waits for the device, so a share of CPU time tells nothing there."""
    if share is None or device != "cpu":
        return None
    return share if share < CONTENDED else None


def _schedstat() -> dict[str, tuple[int, int]] | None:
    """Per thread id: (ns on a CPU, ns waiting in a run queue); None where not readable."""
    try:
        out = {}
        for task in os.listdir(TASKS):
            try:
                ran, waited, *_ = (TASKS / task / "schedstat").read_text().split()
            except FileNotFoundError:  # the thread ended meanwhile
                continue
            out[task] = (int(ran), int(waited))
        return out or None
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Snapshot:
    """What ``contention`` compares: clocks and each thread's scheduler statistics."""

    cpu_s: float
    wall_s: float
    threads: int
    sched: dict[str, tuple[int, int]] | None


def snapshot() -> Snapshot:
    import torch  # here: the benchmark's reports read CONTENDED without torch

    return Snapshot(time.process_time(), time.perf_counter(), torch.get_num_threads(), _schedstat())


def share(before: Snapshot, after: Snapshot) -> float | None:
    """The share of its runnable time the process ran on a core between the snapshots
    (scheduler statistics), else its CPU/wall per thread; None where nothing was measured."""
    if before.sched is not None and after.sched is not None:
        ran = waited = 0
        for task, (run_ns, wait_ns) in after.sched.items():
            run0, wait0 = before.sched.get(task, (0, 0))
            ran, waited = ran + run_ns - run0, waited + wait_ns - wait0
        if ran + waited > 0:
            return ran / (ran + waited)
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        return None
    return (after.cpu_s - before.cpu_s) / wall / max(after.threads, 1)


def contention(before: Snapshot, after: Snapshot, device: torch.device) -> float | None:
    """The share (``share``) where the process waited for its cores between the snapshots
    (``contended``), else None."""
    return contended(share(before, after), device.type)
