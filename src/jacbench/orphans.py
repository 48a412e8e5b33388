"""A job in a worker process of the sweep (joblib's loky workers, submitit's local jobs)
ends when the sweep's process is gone.

Loky keeps its workers alive for reuse and does not watch its parent: after ``kill -9`` of
the sweep they went on measuring and then idled for minutes holding their memory (and
kept loky's and multiprocessing's resource trackers alive, which exit once no worker
holds their pipe). The first job a worker runs starts a thread that ends the worker as
soon as the sweep's process is no longer its parent.
"""

from __future__ import annotations

import os
import sys
import threading
import time

POLL_S = 0.5  # a getppid() call twice a second: nothing next to the timed work
EXIT_CODE = 143  # what a shell shows for a process ended by SIGTERM
_WATCHING: set[int] = set()


def exit_with(sweep_pid: int, poll_s: float = POLL_S) -> bool:
    """In a child of the sweep's process (``sweep_pid``): end this process once that parent
    is gone. Returns whether this process is watched (never the sweep's own process, nor a
    job elsewhere, e.g. on a SLURM node)."""
    if sweep_pid in _WATCHING:
        return True
    if not sweep_pid or os.getpid() == sweep_pid or os.getppid() != sweep_pid:
        return False
    _WATCHING.add(sweep_pid)
    watch = threading.Thread(
        target=_exit_when_orphaned, args=(sweep_pid, poll_s), name="jacbench-sweep-watch"
    )
    watch.daemon = True
    watch.start()
    return True


def _exit_when_orphaned(sweep_pid: int, poll_s: float) -> None:
    while os.getppid() == sweep_pid:
        time.sleep(poll_s)
    print(
        f"jacbench: the sweep's process {sweep_pid} is gone; worker {os.getpid()} exits "
        "(its job in progress is not recorded; run the same sweep again to resume)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_CODE)  # at once: the job's threads and loky's own would hold on
