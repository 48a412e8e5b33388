"""The recorders of a single run in a helper process (issue 29).

Importing MLflow and opening its store take about 2-3 s of a single run's ~7 s, and pyarrow
with the pandas it imports on its first table another 0.4 s; in a thread they would only
share the GIL with torch's import. A helper interpreter, started by ``python -m jacbench``
before torch is imported, imports them on the other core meanwhile (MLflow's store imports
both). The run waits until the helper is ready before it measures anything, so the helper is
idle (blocked on its pipe) during timing; the run's parquet row is written and its MLflow run
logged through it before the command returns. Whatever goes wrong with the helper, the run
records in process instead, as it always did.

This module imports neither torch, pyarrow nor MLflow: the command imports it first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

# Hydra flags after which nothing is measured, and overrides that turn tracking off: no helper
NOTHING_MEASURED = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--version")
NOTHING_MEASURED += ("--shell-completion", "-sc", "--multirun", "-m")


class TrackerGone(RuntimeError):
    """The helper is not there to answer: the caller logs in process instead."""


class TrackingError(RuntimeError):
    """MLflow's error in the helper (its type and message), as logging in process raises it."""


class Tracker:
    """The parent's end of the helper: one JSON line per request, one per answer."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jacbench.record.tracker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._opening = False
        self._asked = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _send(self, request: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self._asked = True
        try:
            self.proc.stdin.write(json.dumps(request, default=str) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise TrackerGone(f"the tracking helper is gone ({exc})") from exc

    def _receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline()
        except (OSError, ValueError) as exc:
            raise TrackerGone(f"the tracking helper is gone ({exc})") from exc
        if not line:
            raise TrackerGone(f"the tracking helper ended (exit {self.proc.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise TrackingError(answer["error"])
        if "os_error" in answer:  # the row could not be written: the caller keeps it elsewhere
            raise OSError(*answer["os_error"])
        return answer

    def open(self, tracking: Any) -> None:
        """Ask the helper to open the store and make the experiment (``ready`` waits)."""
        self._send({"open": dataclasses.asdict(tracking)})
        self._opening = True

    def ready(self) -> None:
        """Return once the helper has opened the store: it is idle from then on. An MLflow
        error there is raised again by ``log_row``, where the run reports it."""
        if self._opening:
            self._opening = False
            with contextlib.suppress(TrackingError):
                self._receive()

    def write_result(self, result: Any, folder: Path) -> Path:
        """The run's parquet row, written by the helper (``parquet.write_result``)."""
        self.ready()
        self._send({"write": dataclasses.asdict(result), "folder": str(folder)})
        return Path(self._receive()["path"])

    def log_row(self, result: Any, parent_run_id: str = "") -> str:
        self.ready()
        self._send({"log": dataclasses.asdict(result), "parent": parent_run_id})
        return str(self._receive()["run_id"])

    def close(self) -> None:
        """Close the pipe: the helper, idle, exits by itself (every answer was received, so
        nothing of the run's recording is left to it; its own shutdown is not waited for).
        A helper never asked anything (a refused input) is stopped at once."""
        if not self._asked:
            self.proc.kill()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


_STARTED: Tracker | None = None


def maybe_start(argv: list[str]) -> None:
    """Start the helper for a single run that may track (called by ``python -m jacbench``)."""
    global _STARTED
    measured = not any(a in NOTHING_MEASURED or a.startswith("--cfg") for a in argv)
    untracked = any(a.replace(" ", "").lower() == "mlflow.enabled=false" for a in argv)
    if measured and not untracked and os.environ.get("JACBENCH_TRACKER", "1") != "0":
        try:
            _STARTED = Tracker()
        except OSError:
            _STARTED = None


def started() -> Tracker | None:
    """The helper this process started, if any (in-process callers, e.g. tests, have none)."""
    return _STARTED


T = TypeVar("T")


def through_helper(remote: Callable[[Tracker], T], local: Callable[[], T]) -> T:
    """``remote(helper)`` where this process started one, else (or once it is gone) ``local()``."""
    helper = started()
    if helper is not None:
        try:
            return remote(helper)
        except TrackerGone as exc:
            logging.getLogger("jacbench").warning("%s: recording in process", exc)
            stop()
    return local()


def stop() -> None:
    global _STARTED
    tracker, _STARTED = _STARTED, None
    if tracker is not None:
        tracker.close()


def _serve() -> None:
    """The helper: MLflow (and with it pyarrow and pandas) imported at once, then requests
    until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the parent's
    from jacbench.core import gc_pause

    gc_pause.pause()
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (the slow part, done now)

    from jacbench.record.mlflow_run import Tracking, ensure_experiment, log_row
    from jacbench.record.parquet import write_result
    from jacbench.record.result import Result

    gc_pause.resume()  # MLflow's objects frozen: its first run is logged without walking them

    def result(fields: dict[str, Any]) -> Result:
        return Result(**fields | {"started_at": datetime.fromisoformat(fields["started_at"])})

    tracking: Tracking | None = None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "open" in request:
                tracking = Tracking(**request["open"])
                answer: dict[str, Any] = {"ok": True}
                ensure_experiment(tracking)
            elif "write" in request:
                try:
                    path = write_result(result(request["write"]), Path(request["folder"]))
                    answer = {"path": str(path)}
                except OSError as exc:
                    answer = {"os_error": [exc.errno, exc.strerror, exc.filename]}
            else:
                assert tracking is not None, "log before open"
                answer = {"run_id": log_row(result(request["log"]), tracking, request["parent"])}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    _serve()
