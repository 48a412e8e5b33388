"""Which jobs of a sweep are recorded already, found in the launching process before any job
is sent out: a resumed sweep then starts no worker (joblib) and queues no task (SLURM) for a
job that is done. A job that cannot be checked here is sent out and checks itself."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig

# jacbench itself (torch, pandas, MLflow behind it) is imported inside the functions: Hydra
# imports every hydra_plugins module at the start-up of any Hydra app in the environment, and
# an app that never launches a jacbench sweep must not pay for it (issue 29).


def maybe_recorded(
    config: DictConfig, job_overrides: Sequence[Sequence[str]], launch_dir: Path
) -> bool:
    """Whether any job can be recorded already: not on a first run into an empty results
    folder, nor with force=true (then no job's config is looked up here: composed, ~0.15 s
    each, under Hydra's basic sweeper; copied from the validation's under jacbench's)."""
    from jacbench.run.sweep.state import results_dir

    if config.get("force"):
        return False
    swept = {o.partition("=")[0].lstrip("+~") for overrides in job_overrides for o in overrides}
    return "results_dir" in swept or any(results_dir(config, launch_dir).glob("*.parquet"))


def recorded_jobs(
    launcher: Launcher, job_overrides: Sequence[Sequence[str]], first_num: int
) -> set[int]:
    """Positions in ``job_overrides`` of the jobs already recorded, each counted in the sweep
    now and said so (force=true sends them all out)."""
    from jacbench.report.display import make_console
    from jacbench.run.resume import count_as_done, recorded_result
    from jacbench.run.sweep.lifecycle import launching_sweep

    sweep = launching_sweep()
    config: DictConfig = launcher.config  # type: ignore[attr-defined]
    launch_dir = Path(str(config.hydra.runtime.cwd))
    if sweep is None or not maybe_recorded(config, job_overrides, launch_dir):
        return set()
    loader = launcher.hydra_context.config_loader  # type: ignore[attr-defined]
    console, done = make_console(), set()
    for i, overrides in enumerate(job_overrides):
        try:
            cfg = loader.load_sweep_config(config, list(overrides))
            found = None if cfg.force else recorded_result(cfg, launch_dir)
        except Exception:
            continue
        if found is not None:
            count_as_done(sweep, first_num + i, found, "already done", console)
            done.add(i)
    return done


def completed(overrides: Sequence[str]) -> JobReturn:
    """What the launcher returns for a job counted as done without running it."""
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
