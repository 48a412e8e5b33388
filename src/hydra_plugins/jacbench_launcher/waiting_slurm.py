"""A SLURM launcher that waits for every task of the array, not only up to the first one that
died: hydra-submitit-launcher stops at the first cancelled or timed-out task, and the tasks still
running then record under a sweep already closed. While it waits, it says which tasks pend and
why (SLURM's squeue reason). A job whose result is already recorded is counted before
submitting and never queued: a resumed sweep asks the cluster only for what is missing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import submitit
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import DictConfig

from jacbench.display import make_console
from jacbench.resume import count_as_done, recorded_result, results_dir
from jacbench.sweep import launching_sweep

POLL_S = 1.0
PENDING_REPORT_S = 60.0  # say which tasks pend (and why) after this long, then as often again


def pending_reasons(job_ids: Sequence[str]) -> list[str]:
    """``<job id> pending (<reason>)`` for each of ``job_ids`` that SLURM still holds back."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "PD", "-o", "%i %r", "-j", ",".join(job_ids)],
        capture_output=True,
        text=True,
    ).stdout
    return [
        f"{jid} pending ({reason})"
        for jid, _, reason in (ln.partition(" ") for ln in out.splitlines())
        if jid
    ]


def wait_all(jobs: Sequence[submitit.Job], report_after: float = PENDING_REPORT_S) -> None:
    """Block until every job has ended, reporting pending ones every ``report_after`` s."""
    next_report = time.monotonic() + report_after
    while not all(job.done() for job in jobs):
        if time.monotonic() >= next_report:
            for line in pending_reasons([j.job_id for j in jobs if not j.done()]):
                print(f"jacbench: SLURM task {line}", file=sys.stderr, flush=True)
            next_report += report_after
        time.sleep(POLL_S)


def collect(job: submitit.Job, overrides: Sequence[str]) -> JobReturn:
    """The task's JobReturn, or a failed one saying why SLURM ended it (cancelled, timeout)."""
    try:
        return job.results()[0]
    except Exception as exc:  # the other tasks' records still count
        reason = " ".join(str(exc).split()).split(" Error stream produced")[0]
        print(
            f"jacbench: SLURM task {job.job_id} ({' '.join(overrides)}) did not complete: {reason}",
            file=sys.stderr,
            flush=True,
        )
        return JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=exc)


def maybe_recorded(
    config: DictConfig, job_overrides: Sequence[Sequence[str]], launch_dir: Path
) -> bool:
    """Whether any job can be recorded already: not on a first run into an empty results
    folder, nor with force=true (then no job's config is composed here: ~0.15 s each)."""
    if config.get("force"):
        return False
    swept = {o.partition("=")[0].lstrip("+~") for overrides in job_overrides for o in overrides}
    return "results_dir" in swept or any(results_dir(config, launch_dir).glob("*.parquet"))


class WaitingSlurmLauncher(SlurmLauncher):
    """hydra-submitit-launcher's SlurmLauncher, waiting for all tasks of the array and
    submitting only the jobs not yet recorded."""

    def recorded(self, job_overrides: Sequence[Sequence[str]], first_num: int) -> set[int]:
        """Positions of the jobs already recorded, each counted in the sweep now (force=true
        submits them all; a job that cannot be checked here is submitted and checks itself)."""
        sweep = launching_sweep()
        launch_dir = Path(str(self.config.hydra.runtime.cwd))
        if sweep is None or not maybe_recorded(self.config, job_overrides, launch_dir):
            return set()
        console, done = make_console(), set()
        for i, overrides in enumerate(job_overrides):
            try:
                loader = self.hydra_context.config_loader
                cfg = loader.load_sweep_config(self.config, list(overrides))
                found = None if cfg.force else recorded_result(cfg, launch_dir)
            except Exception:
                continue
            if found is not None:
                count_as_done(sweep, first_num + i, found, "already done", console)
                done.add(i)
        return done

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        done = self.recorded(job_overrides, initial_job_idx)
        if len(done) == len(job_overrides):
            return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED) for o in job_overrides]
        jobs: dict[int, submitit.Job] = {}  # position in job_overrides -> its SLURM task
        map_array = submitit.AutoExecutor.map_array

        def keep(executor: Any, fn: Any, *columns: Any) -> list[submitit.Job]:
            todo = [i for i in range(len(job_overrides)) if i not in done]
            rows = [row for i, row in enumerate(zip(*columns, strict=True)) if i not in done]
            jobs.update(zip(todo, map_array(executor, fn, *zip(*rows, strict=True)), strict=True))
            return []  # the parent's own collection loop then has nothing to stop on

        submitit.AutoExecutor.map_array = keep  # type: ignore[method-assign]
        try:
            super().launch(job_overrides, initial_job_idx)
        finally:
            submitit.AutoExecutor.map_array = map_array  # type: ignore[method-assign]
        wait_all(list(jobs.values()))
        return [
            collect(jobs[i], o)
            if i in jobs
            else JobReturn(overrides=list(o), status=JobStatus.COMPLETED)
            for i, o in enumerate(job_overrides)
        ]
