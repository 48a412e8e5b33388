"""A job in a worker process of the sweep (joblib's loky workers, submitit's local jobs)
ends when the sweep's process is gone.

Loky keeps its workers alive for reuse and does not watch its parent: after ``kill -9`` of
the sweep they went on measuring and then idled for minutes holding their memory (and
kept loky's and multiprocessing's resource trackers alive, which exit once no worker
holds their pipe). A loky worker starts, as it starts, a thread that ends it as soon as
the sweep's process is gone; every job of a local launcher makes sure one runs, and a job
that starts after the sweep died ends at once.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from typing import Any

POLL_S = 0.5  # a getppid() call twice a second: nothing next to the timed work
EXIT_CODE = 143  # what a shell shows for a process ended by SIGTERM
_WATCHING: set[int] = set()


def exit_with(sweep_pid: int, beside_sweep: bool, poll_s: float = POLL_S) -> bool:
    """In a process the sweep (``sweep_pid``) started: end this process once the sweep's
    process is gone (at once if it already is). Returns whether this process is watched."""
    if not (beside_sweep and sweep_pid) or os.getpid() == sweep_pid:
        return False
    if sweep_pid not in _WATCHING:
        _WATCHING.add(sweep_pid)
        watch = threading.Thread(
            target=_exit_when_orphaned, args=(sweep_pid, poll_s), name="jacbench-sweep-watch"
        )
        watch.daemon = True
        watch.start()
    return True


def watch_loky_workers(sweep_pid: int) -> None:
    """In the sweep's process: joblib's ``loky`` backend starts the watch in each worker as
    it starts, so a sweep killed before a worker got its first job leaves no idle worker
    (loky would keep it for its 300 s idle timeout)."""
    from joblib.parallel import BACKENDS, register_parallel_backend

    global _LOKY
    _LOKY = _LOKY or BACKENDS["loky"]
    watched = functools.partial(_LOKY, initializer=_watch_worker, initargs=(sweep_pid,))
    register_parallel_backend("loky", watched)


_LOKY: Any = None  # joblib's own loky backend


def _watch_worker(sweep_pid: int) -> None:
    """A loky worker's initializer (picklable: a module-level function)."""
    exit_with(sweep_pid, True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the number: ours is gone
        return False
    return True


def _exit_when_orphaned(sweep_pid: int, poll_s: float) -> None:
    # A child of the sweep is re-parented the moment the sweep dies (even before anyone
    # reaps it); a job started by an intermediate process asks whether the sweep is alive.
    if os.getppid() == sweep_pid:
        while os.getppid() == sweep_pid:
            time.sleep(poll_s)
    else:
        while _alive(sweep_pid):
            time.sleep(poll_s)
    print(
        f"jacbench: the sweep's process {sweep_pid} is gone; worker {os.getpid()} exits "
        "(a job in progress is not recorded; run the same sweep again to resume)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_CODE)  # at once: the job's threads and loky's own would hold on
