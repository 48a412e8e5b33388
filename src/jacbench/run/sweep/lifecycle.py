"""The end of a sweep in the launching process: its summary, its MLflow parent run ended,
whatever happened to the jobs (``jacbench.run.sweep.control`` calls it)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any

from jacbench.record.atomic import write_atomic
from jacbench.record.mlflow_run import ParentOutcome, Tracking, finish_parent_run, ui_hint
from jacbench.record.text import one_line
from jacbench.report.display import make_console
from jacbench.run.claims import release_sweep
from jacbench.run.sweep.state import SweepState


def close_sweep(state: SweepState, stopped_by: str = "") -> int:
    """Summary parquet and table, parent run closed whatever happens (FAILED if this fails,
    KILLED when ``stopped_by`` a signal); returns the sweep's exit code (1 when a job failed
    or left no record, or the summary could not be written). Safe to call twice."""
    if state.finished:
        return state.exit_code
    from jacbench.run.sweep.summary import summarise  # pyarrow, pandas: not in a single run

    console = make_console()
    outcome = ParentOutcome({}, failed=True, reason="the sweep's summary failed")
    if stopped_by and state.results_dir:  # its workers were stopped with it
        release_sweep(Path(state.results_dir), state.sweep_id)
    try:
        outcome = summarise(state, console)
        if stopped_by:
            why = f"stopped by {stopped_by}: run the same sweep again to resume"
            outcome = dataclasses.replace(outcome, killed=True, reason=why)
    except KeyboardInterrupt as exc:  # Ctrl-C or a signal during the summary: KILLED
        why = f"stopped by {str(exc) or 'Ctrl-C'} during its summary: run the same sweep again"
        outcome = dataclasses.replace(outcome, killed=True, reason=why)
        raise
    except BaseException as exc:
        reason = one_line(exc)
        outcome = dataclasses.replace(outcome, reason=f"{type(exc).__name__}: {reason}")
        raise
    finally:
        close_parent(state, outcome, console)
        state.finished, state.exit_code = True, int(outcome.failed)
        with contextlib.suppress(OSError):  # a full disk: this process knows it is closed
            state.save()
    return state.exit_code


def close_parent(state: SweepState, outcome: ParentOutcome, console: Any) -> None:
    """End the sweep's MLflow run, or keep what it would show for ``jacbench.run.sweep.repair``."""
    if not (state.tracking and state.parent_run_id):
        return
    tracking = Tracking(**state.tracking)
    try:
        for what in finish_parent_run(tracking, state.parent_run_id, outcome):
            console.print(f"[bold yellow]not attached to the MLflow parent run: {what}[/]")
        state.parent_closed = True
        console.print(ui_hint(tracking, state.parent_run_id), soft_wrap=True)
    except Exception as exc:
        with contextlib.suppress(OSError):
            write_atomic(state.unclosed_parent, outcome.to_json())
        print(
            f"jacbench: the MLflow parent run {state.parent_run_id} could not be closed "
            f"({tracking.uri}: {type(exc).__name__}: {one_line(exc)}); python -m jacbench.sync "
            "closes it, with its files, once tracking is back (so does the next sweep)",
            file=sys.stderr,
        )
