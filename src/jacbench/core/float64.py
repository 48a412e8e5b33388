"""Evaluating a function in float64, closure constants included.

Casting a module moves its parameters and buffers, but not the constants a plain function keeps
in a closure or a global; ``in_float64`` promotes those too, at every torch call. The library
uses it to prove a graph cut at ``prepare`` (``core.probe``); the benchmark's reference computes
in it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from jacbench.core.torch_internals import tree_map

Fn = Callable[[torch.Tensor], torch.Tensor]


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value if value.dtype == torch.float64 else value.double()
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    return value


class Float64Mode(TorchFunctionMode):
    """Every floating tensor (and floating dtype) a torch function receives becomes float64.

    Casting the module moves its parameters and buffers, but not constants a plain function
    keeps in a closure or a global: without this, ``w @ x`` fails with mixed dtypes (or,
    worse, silently keeps float32 rounding in the reference)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map(_up, (args, kwargs or {}))
        return func(*args, **kwargs)


def in_float64(f: Fn) -> Fn:
    def f64(v: torch.Tensor) -> torch.Tensor:
        with Float64Mode():
            return f(v)

    return f64
