"""Rows recorded while tracking was down get their MLflow runs through the jobs' recorder
(``python -m jacbench.sync``), each noted in ``run_ids``; a run carries its row's job id (tag
``jacbench.job_id``), so a sync that could not note its run finds it next time."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pyarrow as pa

from jacbench.record.mlflow_run import Tracking, UnsearchableJobId, log_row, logged_run
from jacbench.record.parquet import read_one
from jacbench.record.result import Result
from jacbench.record.run_ids import RUNS, remember, run_ids
from jacbench.record.text import one_line


class TrackingDown(Exception):
    """MLflow failed: every later row would fail the same way."""


class InProgress(Exception):
    """The row's run is being logged right now: logging it again would make a second."""


def row_result(table: pa.Table) -> Result:
    """The file's (first) row as a Result; columns an older file lacks are empty."""
    row = table.slice(0, 1).to_pylist()[0]
    return Result(**{f.name: row.get(f.name) for f in dataclasses.fields(Result)})


def sync_file(
    path: Path, tracking: Tracking, noted: dict[str, str], parent_run_id: str = ""
) -> str:
    """Log the file's row if it has no run yet (nested under its sweep's ``parent_run_id``) and
    note the run beside it; returns the new id ("" where it had one or cannot be read)."""
    table = read_one(path)
    if table is None or len(table) == 0:
        return ""
    result = row_result(table)
    if result.mlflow_run_id or result.job_id in noted:
        return ""
    lacking = [name for name in ("job_id", "started_at") if not getattr(result, name)]
    if lacking:
        raise ValueError(f"not a complete jacbench row: no {', '.join(lacking)}")
    try:
        runs = logged_run(tracking, result.job_id)
    except UnsearchableJobId:
        raise  # this row's problem, not tracking's
    except Exception as exc:
        raise TrackingDown(f"{type(exc).__name__}: {exc}") from exc
    if runs.in_progress:
        raise InProgress(
            "its run is being logged now (by its job or another sync); sync again in a few minutes"
        )
    run_id = runs.closed or log_row(result, tracking, parent_run_id)  # a failure: this row's
    if not remember(path.parent, result.job_id, run_id):
        raise OSError(f"could not note run {run_id} in {path.parent / RUNS}")
    return run_id


def sync_rows(paths: list[Path], tracking: Tracking) -> tuple[int, int]:
    """Log the rows of ``paths`` that have no run, one ``jacbench:`` line for each that
    cannot be (and one for all, when tracking is down); returns (logged, failed)."""
    noted: dict[Path, dict[str, str]] = {}
    logged = failed = 0
    for done, path in enumerate(paths):
        if path.parent not in noted:
            noted[path.parent] = run_ids(path.parent)
        try:
            logged += bool(sync_file(path, tracking, noted[path.parent]))
        except TrackingDown as exc:
            print(
                f"jacbench: MLflow tracking failed ({tracking.uri}): {one_line(exc)}; "
                f"{len(paths) - done} file(s) not checked: run python -m jacbench.sync "
                "again when tracking is back",
                file=sys.stderr,
            )
            return logged, failed + 1
        except InProgress as exc:
            failed += 1
            print(f"jacbench: {path}: not logged: {exc}", file=sys.stderr)
        except OSError as exc:  # the run is logged; the next sync finds it by job id
            failed += 1
            print(f"jacbench: {path}: run logged, not noted ({one_line(exc)})", file=sys.stderr)
        except Exception as exc:  # a row MLflow refused (e.g. of an older jacbench)
            failed += 1
            what = f"{type(exc).__name__}: {one_line(exc)}"
            print(f"jacbench: {path}: no MLflow run logged ({what})", file=sys.stderr)
    return logged, failed
