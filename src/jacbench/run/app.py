"""``python -m jacbench``: the Hydra entry point for one job, and for sweeps with ``-m``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console

from jacbench.core.enums import LauncherKind
from jacbench.core.interrupt import watched
from jacbench.record import tracker
from jacbench.record.mlflow_run import Tracking, log_row
from jacbench.record.result import Result
from jacbench.record.tracker import Tracker, TrackerGone, TrackingError, through_helper
from jacbench.report.display import make_console, print_result
from jacbench.run.claims import claimed
from jacbench.run.config import conf_dir, register_configs
from jacbench.run.identity import config_hash
from jacbench.run.inputs import (
    check_group_overrides,
    check_results_dir,
    check_tracking,
    refusing,
)
from jacbench.run.launchers import launcher_kind
from jacbench.run.orphans import exit_with
from jacbench.run.resume import count_as_done
from jacbench.run.schema import strategy_options
from jacbench.run.sweep.lifecycle import close_open_sweep
from jacbench.run.sweep.state import UNWRITTEN, SweepState, current_sweep, job_record, results_dir
from jacbench.run.usage import reported

log = logging.getLogger("jacbench")


def record(
    result: Result,
    cfg: DictConfig,
    launch_dir: Path,
    console: Console,
    fallback: Path,
    parent_run_id: str = "",
) -> tuple[Result, Path | None]:
    """The parquet row first (the source of truth), then its MLflow run, whose id is written
    back into the row: a kill in between leaves a row that ``python -m jacbench.sync`` matches
    to its run by job id, never a run without a row. A row the results folder cannot take is
    kept in ``fallback`` (or printed in full): returns where the row is (None: not on disk)."""
    folder = results_dir(cfg, launch_dir)
    try:
        path: Path | None = write_row(result, folder)
    except OSError as exc:
        from jacbench.record.unwritten import keep_unwritten

        path = keep_unwritten(result, folder, exc, fallback)
    if cfg.mlflow.enabled:
        result = track(result, cfg, launch_dir, console, parent_run_id, path)
    log.info("recorded %s (%s) in %s", result.job_id, result.status, path)
    return result, path


def track(
    result: Result,
    cfg: DictConfig,
    launch_dir: Path,
    console: Console,
    parent_run_id: str,
    path: Path | None,
) -> Result:
    """Log the job's MLflow run and write its id into the row at ``path``."""
    tracking = Tracking.resolve(launch_dir, cfg.mlflow.tracking_uri, cfg.mlflow.experiment)
    try:
        run_id = log_through_helper(result, tracking, parent_run_id)
    except Exception as exc:
        what = "" if isinstance(exc, TrackingError) else f"{type(exc).__name__}: "
        reason = what + " ".join(str(exc).split())[:600]
        kept = (
            f"the parquet row is written (mlflow_run_id empty): {path}; python -m jacbench.sync "
            "logs it once tracking is back"
            if path is not None
            else "no run logged"
        )
        print(
            f"jacbench: MLflow tracking failed ({tracking.uri}): {reason}; {kept} "
            "(mlflow.enabled=false runs without tracking)",
            file=sys.stderr,
        )
        return result
    result = dataclasses.replace(result, mlflow_run_id=run_id)
    if path is not None:
        with contextlib.suppress(OSError):  # the run carries the job id: sync finds it
            write_row(result, path.parent)
    return result


def write_row(result: Result, folder: Path) -> Path:
    """Write the row through the helper process that ``python -m jacbench`` started (pyarrow
    already imported there), or in process where there is none, it is gone, or it failed
    otherwise than the disk (an OSError is the caller's to keep the row elsewhere)."""

    def in_process() -> Path:
        from jacbench.record.parquet import write_result  # pyarrow: not in a single run's process

        return write_result(result, folder)

    def remote(helper: Tracker) -> Path:
        try:
            return helper.write_result(result, folder)
        except TrackingError as exc:
            log.warning("the tracking helper could not write the row (%s): writing it here", exc)
            return in_process()

    return through_helper(remote, in_process)


def log_through_helper(result: Result, tracking: Tracking, parent_run_id: str) -> str:
    """Log the run through the helper process (MLflow already imported there), or in process
    where there is none or it is gone."""

    def remote(helper: Tracker) -> str:
        run_id = helper.log_row(result, parent_run_id)
        log.info("MLflow run %s logged by the tracking helper (pid %d)", run_id, helper.pid)
        return run_id

    return through_helper(remote, lambda: log_row(result, tracking, parent_run_id))


def untracked(result: Result, cfg: DictConfig) -> bool:
    """Tracking was asked for and the job has no MLflow run (its failure was said)."""
    return bool(cfg.mlflow.enabled) and not result.mlflow_run_id


def thread_cap() -> int | None:
    """Cores per concurrent job under the joblib launcher, so workers do not oversubscribe."""
    launcher = HydraConfig.get().launcher
    if launcher_kind(launcher) != LauncherKind.JOBLIB:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n_jobs = int(launcher.get("n_jobs") or -1)
    n_jobs = cores if n_jobs < 1 else n_jobs
    return max(1, (cores or 1) // n_jobs)


def run_in_sweep(cfg: DictConfig, sweep: SweepState, launch_dir: Path, console: Console) -> None:
    """Run job ``num`` of the sweep unless it is already recorded; claimed first, so that a
    sweep running beside this one (same results folder) never measures it twice."""
    beside_sweep = launcher_kind(HydraConfig.get().launcher).beside_sweep
    exit_with(sweep.sweep_pid, beside_sweep)  # never outlive a killed sweep
    num = HydraConfig.get().job.num
    folder, key = results_dir(cfg, launch_dir), config_hash(cfg)

    def waiting(owner: dict) -> None:
        console.print(
            f"job {num}: being run by another sweep (pid {owner.get('pid', '?')} on "
            f"{owner.get('host', '?')}); waiting for it"
        )

    from jacbench.record.parquet import find_done_result  # pyarrow: a sweep reads rows

    with claimed(folder, key, waiting, sweep.sweep_id) as waited:
        done_before = find_done_result(folder, key)
        if done_before is not None and (waited or not cfg.force):
            how = "done by another sweep" if waited else "already done"
            count_as_done(sweep, num, done_before, how, console)
            return
        from jacbench.core.registry import load_registry  # torch: once a job runs
        from jacbench.run.runner import execute

        result = execute(cfg, load_registry(), thread_cap())
        unwritten = sweep.folder / UNWRITTEN
        result, path = record(result, cfg, launch_dir, console, unwritten, sweep.parent_run_id)
    if path is None:  # printed in full (and in its MLflow run): the summary counts it missing
        return
    try:
        noted = job_record(
            num, path, result.status, resumed=False, untracked=untracked(result, cfg)
        )
        done = sweep.mark_job(num, noted)
    except OSError as exc:  # the row is written; only this sweep's count of it is not
        print(f"jacbench: job {num}: could not note it in {sweep.folder} ({exc})", file=sys.stderr)
        return
    console.print(
        f"[{done}/{sweep.total}] job {num}: {result.strategy} {result.model} {result.dtype} "
        f"{result.device}: {result.status}"
        + (f" ({result.error_message})" if result.error_message else "")
    )


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def run(cfg: DictConfig) -> None:
    console = make_console()
    from jacbench.core.registry import load_registry  # torch: once a job runs

    for problem in load_registry().problems():
        log.warning(problem)
    launch_dir = Path(HydraConfig.get().runtime.cwd)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        sweep = current_sweep()
        if sweep is None:
            raise RuntimeError("sweep state not found: was the jacbench sweep callback removed?")
        run_in_sweep(cfg, sweep, launch_dir, console)
        return
    with refusing():
        check_results_dir(cfg.results_dir)
        check_tracking(cfg.mlflow)
    open_helper(cfg, launch_dir)  # MLflow's store opened while the job sets up
    from jacbench.run.runner import execute

    measured = execute(cfg, load_registry(), before_timing=helper_ready)
    fallback = Path(HydraConfig.get().runtime.output_dir)
    result, path = record(measured, cfg, launch_dir, console, fallback)
    print_result(result, console, with_reason=result.ok)  # a failure's reason: the line below
    if path is None or path.parent == fallback or untracked(result, cfg):  # said above
        raise SystemExit(1)
    if not result.ok:
        print(f"jacbench: {result.status}: {result.error_message}", file=sys.stderr)
        raise SystemExit(1)


def open_helper(cfg: DictConfig, launch_dir: Path) -> None:
    """Have the tracking helper open the store while the job sets up (``helper_ready`` waits
    for it before timing). Without tracking, the helper is not needed."""
    helper = tracker.started()
    if helper is None:
        return
    if not cfg.mlflow.enabled:
        tracker.stop()
        return
    tracking = Tracking.resolve(launch_dir, cfg.mlflow.tracking_uri, cfg.mlflow.experiment)
    try:
        helper.open(tracking)
    except TrackerGone:
        tracker.stop()


def helper_ready() -> None:
    """Return once the tracking helper is idle, so that nothing of it runs during timing."""
    helper = tracker.started()
    if helper is not None:
        try:
            helper.ready()
        except TrackerGone:
            tracker.stop()


INTERRUPTED = (
    "the job in progress was not recorded, jobs recorded before it are kept "
    "(run the same sweep again to resume)"
)


def main() -> None:
    """Run, then close any sweep this process opened: also when a job crashed and Hydra
    skipped its end-of-sweep callback. A sweep exits 1 when any job failed. Bad input and
    Ctrl-C end in one line, never a traceback."""
    with reported(INTERRUPTED), watched():
        register_configs(strategy_options())  # no torch where remembered: --help, refusals
        check_group_overrides(sys.argv[1:], conf_dir())
        stopped_by = ""
        try:
            run()
        except KeyboardInterrupt as exc:
            stopped_by = str(exc) or "Ctrl-C"  # Terminated carries the signal's name
            raise
        finally:
            exit_code = close_open_sweep(stopped_by)
            tracker.stop()
    if exit_code:
        raise SystemExit(exit_code)


if __name__ == "__main__":
    main()
