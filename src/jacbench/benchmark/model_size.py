"""A model's size checked against the memory budget before it is built: the config is
instantiated on torch's ``meta`` device (no memory, no random numbers drawn), its parameters
and buffers counted, and a model that cannot fit is refused in one line. A size given as a
float (``model.hidden=1e12``) is named as such."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from jacbench.core.errors import ConfigError, innermost, one_line
from jacbench.core.memory_budget import GIB, available_cpu_memory

Build = Callable[[dict[str, Any]], Any]  # a model config -> the object it instantiates


def _whole(value: Any) -> Any:
    """Floats that are whole numbers as ints, inside lists and dicts too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


class TooLarge(Exception):
    """A tensor of the model is larger than any storage can be (torch's size overflowed)."""


def _on_meta(build: Build, cfg: dict[str, Any]) -> nn.Module | None:
    """The model as ``cfg`` makes it on the meta device (None where that cannot be done);
    ``TooLarge`` where a tensor's size overflows."""
    try:
        with torch.device("meta"):
            made = build(cfg)
    except Exception as exc:
        root = innermost(exc)
        if isinstance(root, RuntimeError) and "overflow" in str(root):
            raise TooLarge(one_line(root, None)) from None
        return None
    return made if isinstance(made, nn.Module) else None


def _numel(module: nn.Module) -> int:
    return sum(t.numel() for t in (*module.parameters(), *module.buffers()))


def _floats(cfg: dict[str, Any], prefix: str = "model") -> list[str]:
    """``key=value`` of each whole float in ``cfg`` (what a size written ``1e12`` becomes)."""
    found = []
    for key, value in cfg.items():
        if isinstance(value, float) and value.is_integer():
            found.append(f"{prefix}.{key}={value:g}")
        elif isinstance(value, dict):
            found += _floats(value, f"{prefix}.{key}")
    return found


def check_model_fits(
    build: Build, cfg: dict[str, Any], name: str, dtype: torch.dtype, room: int | None = None
) -> None:
    """Refuse, before it is built, a model whose parameters and buffers cannot fit in the
    memory this process can still allocate (``room``; default ``available_cpu_memory``), and
    a size given as a float."""
    floats = _floats(cfg)
    given = f" ({', '.join(floats)})" if floats else ""
    try:
        module = _on_meta(build, cfg)
        if module is None and floats:
            module = _on_meta(build, _whole(cfg))
            if module is not None and _fits(module, dtype, room):
                raise ConfigError(
                    f"model {name!r}: {', '.join(floats)}: a size must be a whole number "
                    "(Hydra reads 1e12 as a float: write the digits)"
                )
    except TooLarge as exc:
        raise ConfigError(
            f"not run: model {name!r}{given} is larger than any memory can hold ({exc}); "
            "use smaller sizes"
        ) from None
    if module is None:
        return
    numel = _numel(module)
    if not _fits(module, dtype, room):
        need = numel * _bytes_each(dtype)
        free = available_cpu_memory() if room is None else room
        raise ConfigError(
            f"not run: model {name!r}{given} has {numel:.3g} parameters and buffers, about "
            f"{need / GIB:.3g} GiB to build in {str(dtype).removeprefix('torch.')}, but "
            f"{(free or 0) / GIB:.3g} GiB are available; use smaller sizes"
        )


def _bytes_each(dtype: torch.dtype) -> int:
    """Built in torch's default dtype, then cast: both copies at once at the peak."""
    return torch.get_default_dtype().itemsize + dtype.itemsize


def _fits(module: nn.Module, dtype: torch.dtype, room: int | None) -> bool:
    free = available_cpu_memory() if room is None else room
    return free is None or _numel(module) * _bytes_each(dtype) <= free
