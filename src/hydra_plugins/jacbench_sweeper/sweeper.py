"""``hydra/sweeper=jacbench`` (jacbench's default): a Hydra sweeper, through Hydra's public
plugin API, that counts the jobs already recorded and hands the others to the configured
launcher (Hydra's basic, joblib or submitit one, unmodified). What it does is in
``jacbench.run.sweep.control``.

Hydra imports every ``hydra_plugins`` module when any Hydra app starts: this one imports
nothing of jacbench (torch, pandas and MLflow behind it) until a sweep runs (issue 29).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class JacbenchSweeper(Sweeper):
    """Hydra's basic sweeper's options (``max_batch_size``, ``params``) and job list; jobs
    already recorded are counted instead of sent out, and the sweep is opened and closed
    here (its summary and MLflow parent run, whatever happened to the jobs). The task
    function's ``sweep_started()`` and ``sweep_ended(exit_code)``, where it has them, are
    told (jacbench's command says what a stop kept, and exits with the sweep's code)."""

    def __init__(
        self, max_batch_size: int | None = None, params: Mapping[str, Any] | None = None
    ) -> None:
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.launcher = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> int:
        from jacbench.run.sweep.control import run_sweep

        assert self.config is not None and self.hydra_context is not None
        started = getattr(self.task_function, "sweep_started", None)
        if callable(started):
            started()
        code = run_sweep(
            self.config,
            self.hydra_context.config_loader,
            self.launcher,
            arguments,
            self.params,
            self.max_batch_size,
        )
        ended = getattr(self.task_function, "sweep_ended", None)
        if callable(ended):
            ended(code)
        return code
