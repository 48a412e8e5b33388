"""A job in a worker process of the sweep (joblib's loky workers, submitit's local jobs)
ends when the sweep's process is gone.

Loky keeps its workers alive for reuse and does not watch its parent, so every job of a local
launcher starts a thread that ends its process as soon as the sweep's process is gone (at
once if it already is). A worker that never got a job ends at loky's idle timeout.
"""

from __future__ import annotations

import os
import sys
import threading
import time

POLL_S = 0.5  # a getppid() call twice a second: nothing next to the timed work
EXIT_CODE = 143  # what a shell shows for a process ended by SIGTERM


def exit_with(sweep_pid: int, beside_sweep: bool, poll_s: float = POLL_S) -> bool:
    """End this process once the sweep's process is gone; returns whether it is watched."""
    if not (beside_sweep and sweep_pid) or os.getpid() == sweep_pid:
        return False
    name = f"jacbench-watch-sweep-{sweep_pid}"  # a worker that runs several jobs: one watch
    if not any(thread.name == name for thread in threading.enumerate()):
        watch = threading.Thread(target=_exit_when_orphaned, args=(sweep_pid, poll_s), name=name)
        watch.daemon = True
        watch.start()
    return True


def pid_alive(pid: int) -> bool | None:
    """Whether process ``pid`` of this machine runs (None: it runs as another user, so it
    cannot be told from here whether it is the one meant)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return None
    except (ValueError, OverflowError):
        return False
    return True


def _exit_when_orphaned(sweep_pid: int, poll_s: float) -> None:
    # a child of the sweep is re-parented the moment the sweep dies; a grandchild asks
    if os.getppid() == sweep_pid:
        while os.getppid() == sweep_pid:
            time.sleep(poll_s)
    else:
        while pid_alive(sweep_pid):  # another user's process took the number: ours is gone
            time.sleep(poll_s)
    print(
        f"jacbench: the sweep's process {sweep_pid} is gone; worker {os.getpid()} exits "
        "(a job in progress is not recorded; run the same sweep again to resume)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_CODE)  # at once: the job's threads and loky's own would hold on
