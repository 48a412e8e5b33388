"""Models a user may write that jacbench cannot differentiate (tests/test_bad_inputs.py)."""

from __future__ import annotations

import torch
from torch import nn


class IntOutput(nn.Module):
    """Integer outputs: their derivative is zero, so a difference quotient of them is too."""

    input_shape = (4,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 10).long()


class FloatOutput(nn.Module):
    input_shape = (4,)

    def forward(self, x: torch.Tensor) -> float:
        return float(x.sum())


class CollapsesBatch(nn.Module):
    """Says it accepts a batch, then sums over it."""

    input_shape = (4,)
    accepts_batch = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x).sum(0) if x.dim() > 1 else torch.tanh(x)


class MixesBatch(nn.Module):
    """Keeps the batch shape but mixes the samples (each row sees the batch mean)."""

    input_shape = (4,)
    accepts_batch = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(0, keepdim=True) if x.dim() > 1 else torch.zeros_like(x)


class RaisesMarkup(nn.Module):
    """Fails with markup in its message, as an error echoing user data may."""

    input_shape = (4,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("<script>alert(1)</script> is not a number")
