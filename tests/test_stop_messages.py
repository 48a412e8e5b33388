"""What a sweep stopped by SIGTERM says it kept is what is on disk, in each phase: a first-round
job, a preset's side-by-side job, the summary; and its MLflow parent run ends KILLED (issue
60: SIGTERM as a side-by-side job began said "the job is recorded", and its two rows were not
on disk)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.tracking import mlflow_runs

RECORDED = "the job is recorded"


@contextlib.contextmanager
def sigterm_when(seen: Callable[[], bool]) -> Iterator[list[float]]:
    """Send SIGTERM to this process (the in-process sweep) as soon as ``seen()`` holds."""
    sent: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            if seen():
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        done.set()
        thread.join()


def _rows(folder: Path) -> int:
    return len(list((folder / "results").glob("*.parquet")))


def _stopped_line(lines: list[str]) -> str:
    (line,) = [line for line in lines if "interrupted (SIGTERM)" in line]
    return line


@pytest.mark.slow
def test_sigterm_as_a_side_by_side_job_begins_says_it_was_not_recorded(launch, tmp_path):
    pair_saved = lambda: any(tmp_path.glob("multirun/*/*/.jacbench/*/pairs/*.json"))  # noqa: E731
    with sigterm_when(pair_saved) as sent:
        code, lines, printed = launch("+experiment=seed003", mlflow=True)
    assert sent and code == 143, printed
    line = _stopped_line(lines)
    rows = _rows(tmp_path)
    assert rows == 6, printed  # the first round's; the side-by-side job's two are not there
    assert RECORDED not in line, line
    assert "rows recorded so far are kept" in line or "was not recorded" in line, line
    parents, _ = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [p.info.status for p in parents] == ["KILLED"]


@pytest.mark.slow
def test_sigterm_during_the_summary_ends_the_parent_run_killed(launch, tmp_path):
    with sigterm_when(lambda: any(tmp_path.glob("multirun/*/*/summary.parquet"))) as sent:
        code, lines, printed = launch("-m", "strategy=jacrev,jacfwd", mlflow=True)
    assert sent and code == 143, printed
    line = _stopped_line(lines)
    assert _rows(tmp_path) == 2
    assert RECORDED not in line and "rows recorded so far are kept" in line, line
    parents, jobs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [p.info.status for p in parents] == ["KILLED"], printed
    assert len(jobs) == 2 and {j.info.status for j in jobs} == {"FINISHED"}
