"""``python -m jacbench``: the Hydra entry point for one job, and for sweeps with ``-m``."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console

from jacbench.core.errors import ConfigError
from jacbench.core.interrupt import watched
from jacbench.record.mlflow_run import Tracking
from jacbench.record.result import Round, Status
from jacbench.record.text import shown_logs, terminal_text
from jacbench.report.display import make_console, print_result
from jacbench.run.claims import claimed, waiting_line
from jacbench.run.collector import Collector
from jacbench.run.config import conf_dir, register_configs
from jacbench.run.inputs import (
    check_group_overrides,
    check_results_dir,
    check_round,
    check_side_by_side,
    check_tracking,
    refusing,
    shared_options,
)
from jacbench.run.launchers import LauncherKind, launcher_kind
from jacbench.run.orphans import exit_with
from jacbench.run.pair import claim_key
from jacbench.run.progress import JobProgress
from jacbench.run.recording import TrackingFailed, track, write_row
from jacbench.run.resume import count_as_done, reusable
from jacbench.run.sweep.state import UNWRITTEN, SweepState, current_sweep, job_record, results_dir
from jacbench.run.usage import reported

log = logging.getLogger("jacbench")


def thread_cap() -> int | None:
    """Cores per concurrent job under the joblib launcher, so workers do not oversubscribe."""
    launcher = HydraConfig.get().launcher
    if launcher_kind(launcher) != LauncherKind.JOBLIB:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores_per_job(int(launcher.get("n_jobs") or -1), cores)


def cores_per_job(n_jobs: int, cores: int | None) -> int:
    """The cores each of ``n_jobs`` concurrent jobs gets (``n_jobs`` < 1: one job per core,
    joblib's meaning); ``cores`` None where the machine does not say (``os.cpu_count``)."""
    cores = cores or 1
    return max(1, cores // (cores if n_jobs < 1 else n_jobs))


def run_in_sweep(
    cfg: DictConfig, sweep: SweepState, launch_dir: Path, console: Console, progress: JobProgress
) -> None:
    """Run this job of the sweep under its claim, held until it is recorded and counted, so
    that a sweep beside this one never measures it twice (its rows are reused instead). A
    side-by-side job re-times its pair and records a row for each."""
    progress.between()  # nothing of this job is on disk yet, whatever the last job left
    beside_sweep = launcher_kind(HydraConfig.get().launcher).beside_sweep
    exit_with(sweep.sweep_pid, beside_sweep)  # never outlive a killed sweep
    num = sweep.position(HydraConfig.get().job.num)
    pair = sweep.pair(num)
    if (pair is not None) != (cfg.round == Round.SIDE_BY_SIDE):
        raise ConfigError(
            f"round={cfg.round}: a sweep's side-by-side jobs are made by the sweep itself "
            "(a preset's re-timing of its best two); leave round out"
        )
    folder = results_dir(cfg, launch_dir)
    key = claim_key(cfg, pair)

    def waiting(owner: dict) -> None:
        console.print(waiting_line(num, owner))

    with claimed(folder, key, waiting, sweep.sweep_id) as waited:
        # asked again under the claim (force=true measures again, unless another sweep did)
        found = reusable(cfg, launch_dir, force=bool(cfg.force) and not waited, pair=pair)
        if found is not None:
            how = "done by another sweep" if waited else "already done"
            count_as_done(sweep, num, found, how, console)
            return
        from jacbench.core.registry import load_registry  # torch: once a job runs

        progress.measuring()
        if pair is None:
            from jacbench.run.runner import execute

            results = [execute(cfg, load_registry(), thread_cap())]
        else:
            from jacbench.run.side_by_side import run_pair

            results = run_pair(pair, load_registry(), thread_cap())
        rows = [write_row(result, folder, sweep.folder / UNWRITTEN) for result in results]
        progress.written(rows[-1])
        tracking = Tracking(**sweep.tracking) if sweep.tracking and cfg.mlflow.enabled else None
        for index, (result, row) in enumerate(zip(results, rows, strict=True)):
            if tracking is not None and not sweep.tracking_down():
                try:
                    run_id = track(result, tracking, sweep.parent_run_id, row)
                    results[index] = dataclasses.replace(result, mlflow_run_id=run_id)
                except TrackingFailed as exc:
                    sweep.give_up_tracking(str(exc))
        progress.recorded()
        written = [row for row in rows if row is not None]
        if len(written) < len(rows):  # printed in full (and in its run): counted missing
            return
        statuses = {str(result.status) for result in results}
        status = next((s for s in (Status.FAILED, Status.SKIPPED) if s in statuses), Status.OK)
        try:
            untracked = bool(cfg.mlflow.enabled) and not all(r.mlflow_run_id for r in results)
            done = sweep.mark_job(num, job_record(num, written, str(status), False, untracked))
        except OSError as exc:  # the row is written; only this sweep's count of it is not
            print(
                f"jacbench: job {num}: could not note it in {sweep.folder} ({exc})", file=sys.stderr
            )
            return
    for result in results:
        what = f"{result.strategy} {result.model} {result.dtype} {result.device}"
        console.print(
            f"[{done}/{sweep.total}] job {num}: {terminal_text(what)}: {result.status}"
            + (" (side by side)" if pair is not None else "")
            + (f" ({terminal_text(result.error_message)})" if result.error_message else "")
        )
    progress.between()


def run(cfg: DictConfig, progress: JobProgress, collector: Collector) -> None:
    """Hydra's task: one job, in a single run or as a job of a sweep."""
    console = make_console()
    from jacbench.core.registry import load_registry  # torch: once a job runs

    for problem in load_registry().problems():
        log.warning(problem)
    launch_dir = Path(HydraConfig.get().runtime.cwd)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        sweep = current_sweep()
        if sweep is None:
            raise ConfigError(
                "this sweep was not opened by jacbench's sweeper: sweep with hydra/sweeper=jacbench"
                " (the default)"
            )
        progress.in_sweep = True
        run_in_sweep(cfg, sweep, launch_dir, console, progress)
        return
    with refusing():
        check_results_dir(cfg.results_dir)
        check_tracking(cfg.mlflow)
        check_round(cfg.get("round"), single_run=True)
        check_side_by_side(cfg.get("side_by_side"))
    from jacbench.run.runner import execute

    progress.measuring()
    result = execute(cfg, load_registry())
    with collector.off():
        output = Path(HydraConfig.get().runtime.output_dir)  # where a refused row is kept
        row = write_row(result, results_dir(cfg, launch_dir), output)
        progress.written(row)
        print_result(result, console, with_reason=result.ok)  # a failure's reason: below
        failed = row is None or row.parent == output  # said in its own line
        if cfg.mlflow.enabled:
            tracking = Tracking.resolve(launch_dir, cfg.mlflow.tracking_uri, cfg.mlflow.experiment)
            try:
                console.print(f"MLflow run: {track(result, tracking, '', row)} ({tracking.uri})")
            except TrackingFailed:
                failed = True
    progress.recorded()
    if failed:
        raise SystemExit(1)
    if not result.ok:
        print(f"jacbench: {result.status}: {result.error_message}", file=sys.stderr)
        raise SystemExit(1)


@dataclass
class Task:
    """Hydra's task function: the command's state to its jobs, the sweep's exit code back."""

    progress: JobProgress
    collector: Collector
    exit_code: int = 0

    def __call__(self, cfg: DictConfig) -> None:
        shown_logs()  # the job's own logging, as Hydra just set it up
        run(cfg, self.progress, self.collector)

    def sweep_started(self) -> None:
        self.progress.in_sweep = True  # a stop says what the sweep keeps, jobs elsewhere too

    def sweep_ended(self, exit_code: int) -> None:
        self.exit_code = exit_code


def main(collector: Collector | None = None) -> None:
    """Run one job, or a sweep with ``-m`` (exit 1 when any job failed). Bad input and
    Ctrl-C end in one line that says what was kept."""
    task = Task(JobProgress(), collector or Collector())
    with reported(task.progress.line), watched():
        from jacbench.core.registry import load_registry  # torch: the strategies' options

        register_configs(load_registry())
        check_group_overrides(sys.argv[1:], conf_dir())
        sys.argv[1:] = shared_options(sys.argv[1:])  # Hydra reads its overrides from argv
        task.collector.start_work()
        hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")(task)()
    if task.exit_code:
        raise SystemExit(task.exit_code)


if __name__ == "__main__":
    main()
