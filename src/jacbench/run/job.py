"""The Job: made once from the composed config and read by every stage: its identity, its
config validated into typed values and the columns that say what made its row; every
problem of the config becomes one ConfigError."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from jacbench.core.errors import ConfigError
from jacbench.core.numerics import parse_dtype, tolerance
from jacbench.core.registry import Registry
from jacbench.core.strategy import StrategySpec
from jacbench.record import variant
from jacbench.run.identity import Identity
from jacbench.run.provenance import device_name, provenance
from jacbench.timing.config import TimingConfig


@functools.cache
def git_commit() -> str:
    """The commit of the jacbench checkout in use, where it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


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
class Job:
    """One job, validated: what its stages need, and the columns known before it runs."""

    identity: Identity
    model: dict[str, Any]
    strategy: StrategySpec
    options: Any
    dtype: torch.dtype
    device: torch.device
    timing: TimingConfig
    tolerance: float  # the relative error its answer is judged right within
    columns: dict[str, Any]
    jacobian_max_entries: int = 4096

    @property
    def seed(self) -> int:
        return self.identity.seed

    def with_threads(self, threads: int) -> Job:
        """The job timed on ``threads`` torch threads (a cap where jobs share the cores)."""
        timing = dataclasses.replace(self.timing, threads=threads)
        return dataclasses.replace(
            self, timing=timing, columns={**self.columns, "threads": threads}
        )


def _container(node: Any) -> dict[str, Any]:
    # a DictConfig's container is a dict; OmegaConf's stub returns any container
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]


def make_job(
    cfg: DictConfig, registry: Registry, identity: Identity, thread_cap: int | None = None
) -> Job:
    """Validate the composed config (``identity``: its ``identify``) into a Job;
    ``thread_cap`` bounds the torch threads where jobs share the machine's cores."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(
            f"missing value(s) for {', '.join(missing)}: set them, e.g. {missing[0]}=..."
        )
    device = resolve_device(cfg.device.name)
    _bounded("seed", cfg.seed, 0, 2**63 - 1)  # torch.manual_seed's range
    most = _bounded("jacobian_max_entries", cfg.jacobian_max_entries, 0, 2**62)
    strategy_cfg = _container(cfg.strategy)
    spec = registry.get(strategy_cfg.pop("name"))
    try:
        options = spec.make_options(strategy_cfg)
    except ConfigError:
        raise  # already names the strategy
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"strategy {spec.name!r}: {exc}") from exc
    model, dtype = _container(cfg.model), parse_dtype(cfg.dtype.name)
    timing = TimingConfig(**_container(cfg.timing))
    made_by = provenance(spec.setup.__module__, model, device_name(device))
    columns = {
        "wrt": str(model.get("wrt") or "input"),
        "seed": identity.seed,
        "threads": timing.threads,
        "strategy_kind": spec.kind.value,
        "strategy_mode": spec.mode.value,
        "strategy_options": json.dumps(dataclasses.asdict(options), sort_keys=True),
        "variant": variant.of_options(spec.name, options),
        "model_options": json.dumps(model, sort_keys=True, default=str),
        "config_hash": identity.config_hash,
        "git_commit": git_commit(),
        **made_by.columns(),
    }
    tol = tolerance(dtype, spec.kind)
    job = Job(identity, model, spec, options, dtype, device, timing, tol, columns, most)
    if thread_cap is not None and timing.threads > thread_cap:
        return job.with_threads(thread_cap)
    return job
