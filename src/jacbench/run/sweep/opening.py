"""Opening a sweep in the launching process, before any job: its inputs checked, its MLflow
parent run started, its state saved for the jobs."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from jacbench.record.mlflow_run import Tracking, start_parent_run
from jacbench.record.server_probe import unanswered
from jacbench.record.text import one_line
from jacbench.report.display import make_console
from jacbench.run.claims import boot_id
from jacbench.run.inputs import check_sweep, refusing
from jacbench.run.pair import second_round
from jacbench.run.sweep.state import SWEEP_ENV, SweepState, new_sweep_id, results_dir


def sweep_name(swept: list[str], experiment: str | None, jobs: int, when: datetime) -> str:
    """What was swept and when, e.g. ``seed004: model, strategy (24 jobs) 2026-11-22 17:40``."""
    what = ", ".join(swept) or "one job"
    what = f"{experiment}: {what}" if experiment else what
    return f"{what} ({jobs} jobs) {when:%Y-%m-%d %H:%M}"


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys of ``key=value`` overrides that take several values (lists, globs, ranges)."""
    keys = []
    for key, _, value in (o.partition("=") for o in overrides):
        if "," in value or value.startswith(("glob(", "range(", "choice(")):
            keys.append(key.lstrip("+~"))
    return list(dict.fromkeys(keys))


def open_sweep(config: DictConfig, jobs: int) -> SweepState:
    """Check the sweep's inputs, start its MLflow parent run, save its state for the jobs."""
    with refusing():
        check_sweep(config, jobs)
    launch_dir = Path.cwd()
    overrides = list(config.hydra.overrides.task)
    sweep_dir = (launch_dir / str(config.hydra.sweep.dir)).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")  # as Hydra's own sweeper does
    state = SweepState(
        new_sweep_id(),
        str(sweep_dir),
        jobs,
        overrides,
        None,
        config.get("analysis"),
        bool(config.get("report", True)),
        side_by_side=second_round(config.get("side_by_side", "best_two")).value,
        sweep_pid=os.getpid(),
        host=socket.gethostname(),
        boot=boot_id(),
        results_dir=str(results_dir(config, launch_dir)),
    )
    console = make_console()
    if config.mlflow.enabled:
        tracking = Tracking.resolve(
            launch_dir, config.mlflow.tracking_uri, config.mlflow.experiment
        )
        state.tracking = dataclasses.asdict(tracking)
        silent = unanswered(tracking.uri)  # said at once, not after MLflow's own tries
        try:
            if silent:
                raise ConnectionError(f"the tracking server does not answer: {silent}")
            state.parent_run_id = start_parent_run(
                tracking,
                sweep_name_of(config, jobs),
                {
                    "overrides": " ".join(overrides) or "(none)",
                    "sweep_dir": str(sweep_dir),
                    "total_jobs": str(state.total),
                },
            )
        except Exception as exc:
            why = f"{type(exc).__name__}: {one_line(exc)}"
            print(
                f"jacbench: MLflow tracking failed ({tracking.uri}): {why}; the sweep records "
                "its rows without MLflow runs (python -m jacbench.sync logs them once "
                "tracking is back)",
                file=sys.stderr,
            )
            state.give_up_tracking(why)
    state.save()
    if state.parent_run_id and state.tracking is not None:  # a parent run needs tracking
        close_left_open_quietly(Tracking(**state.tracking), state.parent_run_id, console)
    tell_jobs(config, state.sweep_id)
    console.print(
        f"[bold]jacbench sweep[/]: {state.total} jobs, folder {sweep_dir}"
        + (f", MLflow parent run {state.parent_run_id}" if state.parent_run_id else "")
    )
    return state


def close_left_open_quietly(tracking: Tracking, opening: str, console: Any) -> None:
    """Parent runs that earlier sweeps left open, closed as this one opens."""
    from jacbench.run.sweep.repair import close_left_open

    try:
        for line in close_left_open(tracking, skip=opening):
            console.print(line)
    except Exception as exc:
        console.print(f"parent runs left open by earlier sweeps not closed: {one_line(exc)}")


def sweep_name_of(config: DictConfig, jobs: int) -> str:
    """The parent run's name: what the command line and the preset sweep, and when."""
    overrides = list(config.hydra.overrides.task)
    sweeper_params = config.hydra.sweeper.get("params") or {}
    swept = swept_keys([f"{k}={v}" for k, v in sweeper_params.items()] + overrides)
    experiment = next(
        (o.partition("=")[2] for o in overrides if o.lstrip("+").startswith("experiment=")),
        None,
    )
    return sweep_name(swept, experiment, jobs, datetime.now())


def tell_jobs(config: DictConfig, sweep_id: str) -> None:
    """Every job of this sweep gets ``sweep_id`` in its environment, through the overrides
    each job's config is composed from (this process's environment misses reused workers)."""
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.overrides.hydra.append(f"++hydra.job.env_set.{SWEEP_ENV}={sweep_id}")
