"""A measured job's records: its parquet row first, written once and before any MLflow call
(the source of truth, never waiting on a tracking server), then its MLflow run, whose id is
noted beside the row (``jacbench.record.run_ids``)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from jacbench.record.mlflow_run import Tracking, log_row
from jacbench.record.result import Result
from jacbench.record.run_ids import remember
from jacbench.record.text import one_line


def write_row(result: Result, folder: Path, fallback: Path) -> Path | None:
    """The row in ``folder``, or where the results folder refuses it, kept in ``fallback``
    (or printed in full); returns where it is (None: not on disk)."""
    from jacbench.record.parquet import write_result  # pyarrow: not for --help or a refusal
    from jacbench.record.unwritten import keep_unwritten

    try:
        return write_result(result, folder)
    except OSError as exc:
        return keep_unwritten(result, folder, exc, fallback)


class TrackingFailed(Exception):
    """MLflow did not take the job's run (the reason is said in one ``jacbench:`` line)."""


def track(result: Result, tracking: Tracking, parent_run_id: str, row: Path | None) -> str:
    """Log the job's MLflow run and note its id beside the row; returns the run's id. A
    failure is one ``jacbench:`` line saying where the row is, then TrackingFailed."""
    try:
        run_id = log_row(result, tracking, parent_run_id)
    except Exception as exc:
        kept = (
            f"the parquet row is written: {row}; python -m jacbench.sync logs its run once "
            "tracking is back"
            if row is not None
            else "no run logged"
        )
        print(
            f"jacbench: MLflow tracking failed ({tracking.uri}): {type(exc).__name__}: "
            f"{one_line(exc, 600)}; "
            f"{kept} (mlflow.enabled=false runs without tracking)",
            file=sys.stderr,
        )
        raise TrackingFailed(str(exc)) from exc
    if row is not None:
        remember(row.parent, result.job_id, run_id)
        link_row(result, row, run_id)
    return run_id


def link_row(result: Result, row: Path, run_id: str) -> bool:
    """Rewrite the row with the id of its MLflow run; False where it was not rewritten."""
    from jacbench.record.parquet import result_filename, write_result

    if row.name != result_filename(result) or not row.exists():
        return False
    try:
        write_result(dataclasses.replace(result, mlflow_run_id=run_id), row.parent)
    except OSError:
        return False
    return True
