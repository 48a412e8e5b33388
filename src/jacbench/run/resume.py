"""Resuming a sweep: a job whose result is already recorded is counted, not measured again,
whether the job finds that out itself or the SLURM launcher does before submitting it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from jacbench.run.identity import config_hash
from jacbench.run.sweep.state import SweepState, job_record, results_dir


def recorded_result(cfg: DictConfig, launch_dir: Path) -> Path | None:
    """The file holding this job's ``ok`` or ``skipped`` row, if one is recorded."""
    from jacbench.record.parquet import find_done_result  # pyarrow: not in a single run

    return find_done_result(results_dir(cfg, launch_dir), config_hash(cfg))


def count_as_done(
    sweep: SweepState, num: int, result_file: Path, how: str, console: Console
) -> None:
    """Count job ``num`` as done by ``result_file`` in the sweep, and say so."""
    done = sweep.mark_job(num, job_record(num, result_file, "done", resumed=True))
    console.print(
        f"[{done}/{sweep.total}] job {num}: {how} ({result_file.name}); force=true re-runs it"
    )
