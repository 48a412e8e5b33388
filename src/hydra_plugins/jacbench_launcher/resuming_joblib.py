"""Hydra's joblib launcher, sending to its workers only the jobs not yet recorded: a resumed
sweep with every job done starts no worker (each would import torch and MLflow, seconds of
CPU, to learn that its job is done), and one with some done runs only the rest, each under its
own job number, in no more workers than there are jobs to run. ``register()`` makes it what
``hydra/launcher=joblib`` selects."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

from hydra_plugins.jacbench_launcher.recorded import completed, recorded_jobs


class ResumingJoblibLauncher(JoblibLauncher):
    """hydra-joblib-launcher's launcher, with jobs already recorded counted in the sweep's
    process instead of in a worker."""

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        done = recorded_jobs(self, job_overrides, initial_job_idx)
        if len(done) == len(job_overrides):
            return [completed(o) for o in job_overrides]
        todo = len(job_overrides) - len(done)
        from hydra_plugins.hydra_joblib_launcher import _core  # joblib: not at Hydra's plugin scan
        from joblib import effective_n_jobs

        parallel = _core.Parallel

        class TodoOnly(parallel):  # type: ignore[misc, valid-type]
            """joblib.Parallel given Hydra's tasks, each already bound to its job number: runs
            those not done, in no more workers than there are of them (an idle loky worker
            still imports jacbench, and so torch)."""

            def __init__(self, n_jobs: int | None = None, **kwargs: Any) -> None:
                super().__init__(n_jobs=min(effective_n_jobs(n_jobs), todo), **kwargs)

            def __call__(self, tasks: Iterable[Any]) -> Any:
                return super().__call__(t for i, t in enumerate(tasks) if i not in done)

        # Patched for this call rather than the plugin's launch() copied: launch() composes
        # and binds every job (configs, env, sweep folders), and its only seam for which
        # tasks run is its Parallel(**cfg)(tasks) call.
        _core.Parallel = TodoOnly
        try:
            ran = iter(super().launch(job_overrides, initial_job_idx))
        finally:
            _core.Parallel = parallel
        return [completed(o) if i in done else next(ran) for i, o in enumerate(job_overrides)]


def register() -> None:
    """Store this launcher as ``hydra/launcher=joblib``, with the plugin's own defaults (its
    options, e.g. ``hydra.launcher.n_jobs=2``, are unchanged). After Hydra's plugin scan, which
    runs every plugin module again (so the plugin stores its own node again) and runs once per
    process; the sweep hands the config store to its workers."""
    Plugins.instance()
    ConfigStore.instance().store(
        group="hydra/launcher",
        name="joblib",
        node=JobLibLauncherConf(_target_=f"{__name__}.{ResumingJoblibLauncher.__name__}"),
        provider="jacbench",
    )
