"""A module's parameters as one flat vector and back: Jacobians w.r.t. parameters.

Levenberg-Marquardt and friends work on a vector theta. ``FlatParams`` turns a module's
parameters into that vector, calls the module at any theta without touching its own
parameters (``torch.func.functional_call``), and writes an updated theta back.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class FlatParams:
    """The parameters of ``module`` (those that exist when it is built) as a flat vector."""

    def __init__(self, module: nn.Module) -> None:
        named = list(module.named_parameters())
        if not named:
            raise ValueError(f"{type(module).__name__} has no parameters to flatten")
        self.module = module
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]

    @property
    def size(self) -> int:
        """N: the length of the flat vector."""
        return sum(self.sizes)

    def vector(self) -> torch.Tensor:
        """A detached copy of the current parameters, concatenated in ``named_parameters``
        order."""
        params = dict(self.module.named_parameters())
        return torch.cat([params[n].detach().reshape(-1) for n in self.names]).clone()

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """``theta`` split back into named tensors of the parameters' shapes (views)."""
        if theta.shape != (self.size,):
            raise ValueError(f"theta must have shape ({self.size},), got {tuple(theta.shape)}")
        chunks = torch.split(theta, self.sizes)
        return {n: c.reshape(s) for n, c, s in zip(self.names, chunks, self.shapes, strict=True)}

    def call(self, theta: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """The module's forward at parameters ``theta``; its own parameters are untouched."""
        return torch.func.functional_call(self.module, self.unflatten(theta), args, kwargs)

    @torch.no_grad()
    def load_(self, theta: torch.Tensor) -> None:
        """Write ``theta`` into the module's parameters (in place, e.g. after a fit)."""
        params = dict(self.module.named_parameters())
        for name, value in self.unflatten(theta).items():
            params[name].copy_(value)
