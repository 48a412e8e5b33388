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
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

from hydra_plugins.jacbench_launcher.recorded import completed, recorded_jobs

if TYPE_CHECKING:  # submitit is imported where a SLURM sweep launches, as hydra-submitit does
    import submitit

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


class WaitingSlurmLauncher(SlurmLauncher):
    """hydra-submitit-launcher's SlurmLauncher, waiting for all tasks of the array and
    submitting only the jobs not yet recorded."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        done = recorded_jobs(self, job_overrides, initial_job_idx)
        if len(done) == len(job_overrides):
            return [completed(o) for o in job_overrides]
        import submitit

        jobs: dict[int, submitit.Job] = {}  # position in job_overrides -> its SLURM task
        map_array = submitit.AutoExecutor.map_array

        def keep(executor: Any, fn: Any, *columns: Any) -> list[submitit.Job]:
            todo = [i for i in range(len(job_overrides)) if i not in done]
            rows = [row for i, row in enumerate(zip(*columns, strict=True)) if i not in done]
            jobs.update(zip(todo, map_array(executor, fn, *zip(*rows, strict=True)), strict=True))
            return []  # the parent's own collection loop then has nothing to stop on

        # Patched for this call rather than the plugin's launch() copied: launch() composes
        # and pickles every job, and its only seam for which tasks are submitted (and for
        # not waiting on its own) is its executor.map_array call.
        submitit.AutoExecutor.map_array = keep  # type: ignore[method-assign]
        try:
            super().launch(job_overrides, initial_job_idx)
        finally:
            submitit.AutoExecutor.map_array = map_array  # type: ignore[method-assign]
        wait_all(list(jobs.values()))
        return [
            collect(jobs[i], o) if i in jobs else completed(o) for i, o in enumerate(job_overrides)
        ]
