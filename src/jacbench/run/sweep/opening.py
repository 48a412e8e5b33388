"""Opening a sweep in the launching process, before any job: its inputs checked, its jobs
counted, its MLflow parent run started, its state saved for the jobs."""

from __future__ import annotations

import dataclasses
import os
from datetime import datetime
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, open_dict, read_write

from jacbench.core.enums import LauncherKind
from jacbench.record.mlflow_run import Tracking, start_parent_run
from jacbench.report.display import make_console
from jacbench.run.inputs import check_sweep, refusing
from jacbench.run.launchers import launcher_kind
from jacbench.run.orphans import watch_loky_workers
from jacbench.run.sweep.state import SWEEP_ENV, SweepState, new_sweep_id, results_dir


def count_jobs(config: DictConfig) -> int:
    """How many jobs the basic sweeper makes: its ``params`` (set by experiment presets)
    followed by the command line's overrides, globs expanded, as BasicSweeper does."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = config.hydra.sweeper.get("params") or {}
    overrides = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    loader = GlobalHydra.instance().config_loader()
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))


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


def open_sweep(config: DictConfig) -> SweepState:
    with refusing():  # a bad input stops the sweep here, before any job or MLflow run
        jobs = count_jobs(config)
        check_sweep(config, jobs)
    launch_dir = Path.cwd()
    overrides = list(config.hydra.overrides.task)
    sweep_dir = (launch_dir / str(config.hydra.sweep.dir)).resolve()
    state = SweepState(
        new_sweep_id(),
        str(sweep_dir),
        jobs,
        overrides,
        None,
        config.get("analysis"),
        bool(config.get("report", True)),
        side_by_side=bool(config.get("side_by_side", True)),
        sweep_pid=os.getpid(),
        results_dir=str(results_dir(config, launch_dir)),
    )
    console = make_console()
    if config.mlflow.enabled:
        tracking = Tracking.resolve(
            launch_dir, config.mlflow.tracking_uri, config.mlflow.experiment
        )
        state.tracking = dataclasses.asdict(tracking)
        params = {
            "overrides": " ".join(overrides) or "(none)",
            "sweep_dir": str(sweep_dir),
            "total_jobs": str(state.total),
        }
        sweeper_params = config.hydra.sweeper.get("params") or {}
        swept = swept_keys([f"{k}={v}" for k, v in sweeper_params.items()] + overrides)
        experiment = next(
            (o.partition("=")[2] for o in overrides if o.lstrip("+").startswith("experiment=")),
            None,
        )
        name = sweep_name(swept, experiment, state.total, datetime.now())
        try:
            state.parent_run_id = start_parent_run(tracking, name, params)
        except Exception as exc:
            console.print(
                f"[bold yellow]MLflow tracking failed ({tracking.uri}): {exc}; "
                "results still go to parquet[/]"
            )
    state.save()
    tell_jobs(config, state.sweep_id)
    if launcher_kind(config.hydra.launcher) == LauncherKind.JOBLIB:
        watch_loky_workers(state.sweep_pid)
    console.print(
        f"[bold]jacbench sweep[/]: {state.total} jobs, folder {sweep_dir}"
        + (f", MLflow parent run {state.parent_run_id}" if state.parent_run_id else "")
    )
    return state


def tell_jobs(config: DictConfig, sweep_id: str) -> None:
    """Every job of this sweep gets ``sweep_id`` in its environment: the launcher composes
    each job's config from these overrides, so this reaches in-process, joblib and SLURM
    jobs alike (an environment variable of this process would miss reused joblib workers)."""
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.overrides.hydra.append(f"++hydra.job.env_set.{SWEEP_ENV}={sweep_id}")
