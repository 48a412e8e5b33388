"""Config schemas (so typos fail clearly) and their registration with Hydra, built from the
strategy registry (every strategy's options are its own dataclass)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from jacbench.timing.config import TimingConfig

if TYPE_CHECKING:
    from jacbench.core.registry import Registry


@dataclass
class DtypeConfig:
    name: str = "float32"


@dataclass
class DeviceConfig:
    name: str = "cpu"  # cpu, cuda or cuda:<index>


@dataclass
class MlflowConfig:
    enabled: bool = True
    tracking_uri: str | None = None  # null: $MLFLOW_TRACKING_URI or sqlite:///<launch>/mlflow.db
    experiment: str = "jacbench"


@dataclass
class JobConfig:
    model: Any = MISSING
    strategy: Any = MISSING
    dtype: DtypeConfig = MISSING
    device: DeviceConfig = MISSING
    timing: TimingConfig = MISSING
    seed: int = 0
    force: bool = False  # in a sweep, re-run jobs that already have an ok row
    reuse_stale: bool = False  # in a sweep, reuse a row even where what made it changed
    round: str = "first"  # side_by_side: a job a sweep's second round adds to re-time two
    jacobian_max_entries: int = 4096  # store computed Jacobians up to this size in results
    analysis: str | None = None  # experiments: "module:function" that answers from the rows
    report: bool = True  # after a sweep, write the report and attach it to the parent run
    side_by_side: str = "best_two"  # a sweep's second round (``run.pair.SecondRound``)
    results_dir: str = "results"  # relative paths are under the launch folder
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


def conf_dir() -> Path:
    """The Hydra config tree: inside the installed wheel, or at the checkout's top level."""
    here = Path(__file__).resolve().parents[1]  # the jacbench package
    for candidate in (here / "conf", here.parents[1] / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise RuntimeError(f"jacbench's conf/ tree was not found next to {here}")


def gpus_for_device(device: str, gpus: int) -> int | None:
    """GPUs a launcher preset asks for: ``gpus`` for a CUDA device, none otherwise (a CPU
    partition refuses any GPU request)."""
    return gpus if str(device).startswith("cuda") else None


# ${jacbench_gpus:${device.name},1} in conf/hydra/launcher/slurm.yaml
OmegaConf.register_new_resolver("jacbench_gpus", gpus_for_device, replace=True)


def register_configs(registry: Registry) -> None:
    """Make every registered strategy a valid ``strategy=<name>`` with its typed options."""
    cs = ConfigStore.instance()
    cs.store(name="jacbench_schema", node=JobConfig)
    for name in registry.names():
        spec = registry.strategies.get(name)
        base = (spec.options,) if spec is not None and spec.options is not None else ()
        node = dataclasses.make_dataclass(
            f"{name}_options", [("name", str, field(default=name))], bases=base
        )
        cs.store(group="strategy", name=name, node=node)
