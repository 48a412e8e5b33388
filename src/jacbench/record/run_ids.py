"""Which MLflow run holds each row, kept beside the rows: a row is written before any MLflow
call, then rewritten with its run's id (``run.recording.link_row``); lest that fail, the link
is also an empty file ``<folder>/.mlflow_runs/<job_id>.<run_id>`` (created atomically, a folder
read in one listing). A lost link is found again by the run's tag ``jacbench.job_id``."""

from __future__ import annotations

import os
import re
from pathlib import Path

RUNS = ".mlflow_runs"
_NAME = re.compile(r"^[0-9A-Za-z_-]+$")  # job and run ids jacbench and MLflow make


def remember(folder: Path, job_id: str, run_id: str) -> bool:
    """Note that ``run_id`` holds the row ``job_id`` in ``folder``; False where it cannot be
    noted (an id that is no plain name, a folder that refuses the file)."""
    if not (_NAME.match(job_id) and _NAME.match(run_id)):
        return False
    try:
        (folder / RUNS).mkdir(exist_ok=True)
        (folder / RUNS / f"{job_id}.{run_id}").touch()
    except OSError:
        return False
    return True


def run_ids(folder: Path) -> dict[str, str]:
    """job_id -> run_id for the rows in ``folder`` whose runs are noted."""
    try:
        entries = os.listdir(folder / RUNS)
    except OSError:
        return {}
    return dict(name.split(".", 1) for name in entries if name.count(".") == 1)
