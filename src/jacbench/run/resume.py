"""Resuming a sweep, in one place: which recorded row a job may reuse instead of being
measured again (``reusable``), and counting it in the sweep (``count_as_done``). The sweep
asks before sending a job out; the job asks again once it holds its claim
(``jacbench.run.claims``), since a sweep beside it may have recorded it meanwhile."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from jacbench.run.identity import config_hash
from jacbench.run.sweep.state import SweepState, job_record, results_dir


def reusable(cfg: DictConfig, launch_dir: Path, force: bool) -> Path | None:
    """The file of the row this job may reuse: an ``ok`` or ``skipped`` row of the same
    config_hash in its results folder (a ``failed`` one is worth another try); none when
    ``force`` asks for a new measurement."""
    if force:
        return None
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
