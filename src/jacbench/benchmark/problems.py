"""The config-to-Problem builder: a model config (a Hydra ``_target_`` and jacbench's own keys)
instantiated and frozen into a Problem, at a point drawn from the job's seed (the library
makes its Problem with ``core.problem.make_problem``, without Hydra).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from jacbench.benchmark.model_size import check_model_fits
from jacbench.core.errors import ConfigError, innermost, one_line
from jacbench.core.memory_budget import check_input_fits
from jacbench.core.problem import WRT_CHOICES, FunctionModule, Problem, make_problem


@dataclass(frozen=True)
class ModelKeys:
    """jacbench's own keys of a model config (conf/jacbench_model.yaml puts them on every
    model); every other key is a constructor argument."""

    name: str = ""  # label in tables; split() defaults it to the _target_'s last part
    wrt: str = "input"  # input or params
    input_shape: tuple[int, ...] | None = None  # default: the module's input_shape attribute
    batch: int = 1  # independent points (per-sample Jacobians); needs wrt=input when > 1

    @classmethod
    def split(cls, model_cfg: dict[str, Any]) -> tuple[ModelKeys, dict[str, Any]]:
        """(jacbench's keys, validated; the constructor's config)."""
        own = {f.name for f in dataclasses.fields(cls)}
        rest = {k: v for k, v in model_cfg.items() if k not in own}
        values = {k: v for k, v in model_cfg.items() if k in own and v is not None}
        target = str(rest.get("_target_") or "?")
        name = values.get("name") or target.rsplit(".", 1)[-1]
        shape = values.get("input_shape")
        if shape is not None:
            shape = _positive_ints(f"model {name!r}: model.input_shape", shape)
        wrt = str(values.get("wrt", "input"))
        if wrt not in WRT_CHOICES:
            raise ConfigError(
                f"model {name!r}: unknown wrt {wrt!r}; valid choices: {', '.join(WRT_CHOICES)}"
            )
        batch = values.get("batch", 1)
        if not _positive_int(batch):
            raise ConfigError(
                f"model {name!r}: model.batch must be a positive integer (1: one point, "
                f"B > 1: B independent points), got {batch!r}"
            )
        return cls(str(name), wrt, shape, batch), rest


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_ints(what: str, values: Any) -> tuple[int, ...]:
    """``values`` as a tuple of positive ints, or one clear ConfigError."""
    items = list(values) if isinstance(values, (list, tuple)) else None
    if not items or not all(_positive_int(v) for v in items):
        raise ConfigError(
            f"{what} must be a list of positive integers (e.g. [8] or [3, 4]), got {values!r}"
        )
    return tuple(items)


def _sample_input(module: nn.Module, shape: Sequence[int], seed: int, batch: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    sampler = getattr(module, "sample_input", None)

    def one() -> torch.Tensor:
        if sampler is not None:
            return sampler(gen).to(torch.float64)
        return torch.randn(tuple(shape), generator=gen, dtype=torch.float64)

    return torch.stack([one() for _ in range(batch)]) if batch > 1 else one()


def build_problem(
    model_cfg: dict[str, Any], dtype: torch.dtype, device: torch.device, seed: int
) -> Problem:
    """Instantiate the model config (a Hydra ``_target_``) and freeze it into a Problem."""
    if not model_cfg.get("_target_"):
        raise ConfigError("the model config needs a _target_ (an importable callable or module)")
    keys, cfg = ModelKeys.split(model_cfg)
    name, target = keys.name, cfg["_target_"]
    import hydra.utils  # here, not at the top: the library (jacbench.prepare) needs no Hydra

    def build(config: dict[str, Any]) -> Any:
        return hydra.utils.instantiate(config, _convert_="all")

    check_model_fits(build, cfg, name, dtype)  # on the meta device: no memory, no RNG
    torch.manual_seed(seed)  # parameter initialisation is part of the problem's identity

    try:
        obj = build(cfg)
    except Exception as exc:  # Hydra wraps the model's own error: report the innermost one
        detail = one_line(innermost(exc), None)
        raise ConfigError(f"cannot build model {name!r} ({target}): {detail}") from exc
    module = obj if isinstance(obj, nn.Module) else FunctionModule(obj)
    shape = keys.input_shape or getattr(module, "input_shape", None)
    if shape is None:
        raise ConfigError(f"model {name!r} needs input_shape (e.g. model.input_shape=[8])")
    shape = _positive_ints(f"model {name!r}: input_shape", shape)  # the module's attribute
    check_input_fits(name, shape, keys.batch, dtype)
    # jacbench owns this module: evaluation mode, and no graph kept to its parameters
    module = module.to(device=device, dtype=dtype).eval().requires_grad_(False)
    # The point is drawn in float64 and rounded once, so every dtype sees the same point.
    inp = _sample_input(module, shape, seed, keys.batch).to(device=device, dtype=dtype)
    has_analytic = hasattr(module, "analytic_jacobian")
    return make_problem(name, module, inp, keys.wrt, has_analytic, keys.batch)
