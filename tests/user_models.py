"""Models written the way users write them (tests/test_reference.py)."""

from __future__ import annotations

import torch
from torch import nn


def closure_mlp(n_in: int = 5, n_out: int = 3):
    """A plain function whose weights live in its closure, drawn in float32 (not buffers of
    a module, so casting a module cannot reach them)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(n_out, n_in, generator=gen)
    bias = torch.randn(n_out, generator=gen)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(weight @ x + bias)

    return f


class Shaped(nn.Module):
    """Defines its own input_shape, so model.input_shape may be left out."""

    input_shape = (6,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * x.sum()


class WideSum(nn.Module):
    """20000 inputs, one output: forward mode would need 20000 passes, reverse mode one."""

    input_shape = (20000,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x).sum().reshape(1)


class Repeat(nn.Module):
    """20000 inputs repeated ``times`` over: a 200000 x 20000 Jacobian (16 GB in float32) from
    a model that costs nothing to build or evaluate."""

    input_shape = (20000,)

    def __init__(self, times: int = 10) -> None:
        super().__init__()
        self.times = times

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(self.times)


class WrongFormula(nn.Module):
    """2 sin(x) with an analytic Jacobian that forgot the 2: the formula disagrees with AD."""

    input_shape = (4,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * torch.sin(x)

    def analytic_jacobian(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diag(torch.cos(x))


class ItemCut(nn.Module):
    """x * sum(x), the sum taken through ``.item()``: AD sees a constant, every AD method
    agrees, and all are 50% off the true derivative."""

    input_shape = (4,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().item()


class CallCounter(nn.Module):
    """A forward that depends on how often it was called: no Jacobian of it can be judged."""

    input_shape = (4,)

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.sin(x) * (1 + 0.01 * self.calls)
