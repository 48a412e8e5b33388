"""The sweep's life in the launching process: opened in a Hydra callback before any job,
closed once whatever happened to the jobs, its MLflow parent run ended.

The launching process opens the sweep in a Hydra callback, before any worker starts (so a
fresh sqlite database is created once), and closes it when the launcher returns, also when a
job crashed and Hydra skipped its own end-of-sweep callback. Jobs find the sweep through a
state file in the sweep folder, which works for in-process, joblib and submitit launchers.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from jacbench.record.mlflow_run import ParentOutcome, Tracking, finish_parent_run, ui_hint
from jacbench.record.text import one_line
from jacbench.report.display import make_console
from jacbench.run.claims import release_sweep
from jacbench.run.sweep.opening import open_sweep
from jacbench.run.sweep.state import SweepState

_OPEN: SweepState | None = None  # the sweep opened by this (launching) process


def close_sweep(state: SweepState, stopped_by: str = "") -> int:
    """Summary parquet and table, parent run closed; returns the sweep's exit code
    (1 when a job failed or left no record, or the summary could not be written). The
    parent run is closed whatever happens here (FAILED, with the reason, if this fails;
    KILLED, with its claims released, when ``stopped_by`` a signal). Safe to call twice."""
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
    """End the sweep's MLflow run (FINISHED, or FAILED with the outcome's reason)."""
    if not (state.tracking and state.parent_run_id):
        return
    tracking = Tracking(**state.tracking)
    try:
        for what in finish_parent_run(tracking, state.parent_run_id, outcome):
            console.print(f"[bold yellow]not attached to the MLflow parent run: {what}[/]")
        console.print(ui_hint(tracking, state.parent_run_id), soft_wrap=True)
    except Exception as exc:
        console.print(f"[bold yellow]could not close MLflow parent run: {exc}[/]")


def launching_sweep() -> SweepState | None:
    """In the launching process, between the sweep's start and end: the sweep it opened."""
    return _OPEN


def close_open_sweep(stopped_by: str = "") -> int:
    """Close the sweep this process opened, if any, and forget it (a later launch in the same
    process starts afresh); returns its exit code."""
    global _OPEN
    state, _OPEN = _OPEN, None  # a later launch in this process starts afresh
    return close_sweep(state, stopped_by) if state is not None else 0


class SweepCallback(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _OPEN
        _OPEN = open_sweep(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if _OPEN is not None:  # closed here; jacbench's main then reads its exit code
            close_sweep(_OPEN)
