"""Hydra's basic sweeper, composing each job's config once: it composes every job of a batch
to validate it, and then the launcher composes each job again (0.14 s per composition for
jacbench's config on a 2-core machine, the largest per-job cost of a sweep outside the job).
Here the launcher, and a launcher's check for jobs already recorded, get a copy of the config
the validation composed."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_loader import ConfigLoader
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ComposedOnce:
    """A config loader that keeps each job's composed config and hands out copies of it; every
    other call goes to Hydra's loader. Pickled (to a joblib worker, a SLURM task) without what
    it kept."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self.composed: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    def load_sweep_config(
        self, master_config: DictConfig, sweep_overrides: Sequence[str]
    ) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        if key not in self.composed:
            self.composed[key] = self.loader.load_sweep_config(master_config, list(sweep_overrides))
        return copy.deepcopy(self.composed[key])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return ComposedOnce, (self.loader,)


class ComposingOnceSweeper(BasicSweeper):
    """``hydra/sweeper=jacbench`` (jacbench's default): Hydra's basic sweeper, the same
    batches and validation, each job composed once."""

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        once = ComposedOnce(hydra_context.config_loader)
        context = HydraContext(config_loader=once, callbacks=hydra_context.callbacks)  # type: ignore[arg-type]
        super().setup(hydra_context=context, task_function=task_function, config=config)
