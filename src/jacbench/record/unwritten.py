"""A row that cannot be written where it belongs (a full disk, a vanished folder) is never
lost: it goes to a fallback folder (beside the sweep's state, or the run's Hydra output
folder), or is printed in full if that fails too. Its MLflow run, logged first, holds it too."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from jacbench.record.parquet import write_result
from jacbench.record.result import Result


def keep_unwritten(result: Result, folder: Path, error: OSError, fallback: Path) -> Path | None:
    """Say (one ``jacbench:`` line) that ``result`` was not written to ``folder``, and keep
    it in ``fallback``; returns where it is kept (None: only printed, in full)."""
    try:
        kept: Path | None = write_result(result, fallback)
    except OSError:
        kept = None
    why = error.strerror or str(error)
    where = (
        f"it is kept in {kept} (python -m jacbench.report reads it there; move it into the "
        "results folder once there is room)"
        if kept
        else "nothing was written there; its full row follows"
    )
    print(
        f"jacbench: the row of job {result.job_id} ({result.strategy} {result.model} "
        f"{result.dtype}) was NOT written to {folder} ({why}); {where}",
        file=sys.stderr,
    )
    if kept is None:
        print(json.dumps(dataclasses.asdict(result), default=str), file=sys.stderr)
    return kept
