"""The JobSpec: one job's configuration validated into typed values (torch devices and
dtypes, the strategy's spec and options); every problem becomes one ConfigError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from jacbench.core.errors import ConfigError
from jacbench.core.numerics import parse_dtype
from jacbench.core.registry import Registry
from jacbench.core.strategy import StrategySpec
from jacbench.run.identity import config_hash
from jacbench.timing.config import TimingConfig


def resolve_device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(
            f"unknown device {name!r}; valid devices: cpu, cuda, cuda:<index>"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device={name} requested but CUDA is not available on this machine "
                f"(torch {torch.__version__}); use device=cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name}: only {torch.cuda.device_count()} GPU(s) visible")
    elif device.type != "cpu" or device.index not in (None, 0):  # cpu:3 would mean cpu
        raise ConfigError(f"unsupported device {name!r}; valid devices: cpu, cuda, cuda:<index>")
    return device


def _bounded(key: str, value: Any, low: int, high: int) -> int:
    """An integer setting within [low, high], or one ConfigError naming it."""
    number = int(value)
    if not low <= number <= high:
        raise ConfigError(f"{key}={value}: must be an integer from {low} to {high}")
    return number


@dataclass(frozen=True)
class JobSpec:
    """One job, validated: what the runner needs and nothing about where it records."""

    model: dict[str, Any]
    strategy: StrategySpec
    options: Any
    dtype: torch.dtype
    device: torch.device
    timing: TimingConfig
    seed: int
    config_hash: str
    jacobian_max_entries: int = 4096


def _container(node: Any) -> dict[str, Any]:
    # a DictConfig's container is a dict; OmegaConf's stub returns any container
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]


def make_job(cfg: DictConfig, registry: Registry) -> JobSpec:
    """Validate the composed config; every problem becomes one ConfigError that says what
    is valid."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(
            f"missing value(s) for {', '.join(missing)}: set them, e.g. {missing[0]}=..."
        )
    strategy_cfg = _container(cfg.strategy)
    spec = registry.get(strategy_cfg.pop("name"))
    try:
        options = spec.make_options(strategy_cfg)
    except ConfigError:
        raise  # already names the strategy
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"strategy {spec.name!r}: {exc}") from exc
    return JobSpec(
        model=_container(cfg.model),
        strategy=spec,
        options=options,
        dtype=parse_dtype(cfg.dtype.name),
        device=resolve_device(cfg.device.name),
        timing=TimingConfig(**_container(cfg.timing)),
        seed=_bounded("seed", cfg.seed, 0, 2**63 - 1),  # torch.manual_seed's range
        config_hash=config_hash(cfg),
        jacobian_max_entries=_bounded("jacobian_max_entries", cfg.jacobian_max_entries, 0, 2**62),
    )
