"""The map's model families (``+experiment=map``): functions from N inputs to M outputs for
any N and M, whose costs grow differently with the two, so that which Jacobian strategy wins
changes across the grid.

- ``dense``: ``jacbench.models.mlp.MLP`` (every output depends on every input; a pass costs
  ~hidden x (N + M)).
- ``Banded``: elementwise, then resampled to M points: each output depends on at most two
  inputs (a banded Jacobian); a pass costs ~N + M.
- ``Conv``: two 1-D convolutions (a receptive field of 9 inputs), then resampled to M points;
  a pass costs ~channels x kernel x N.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def _resampled(y: torch.Tensor, n_out: int) -> torch.Tensor:
    """(..., C, N) linearly interpolated to (..., C * n_out) outputs."""
    lead = y.shape[:-2]
    flat = y.reshape(-1, *y.shape[-2:])
    out = F.interpolate(flat, size=n_out, mode="linear", align_corners=True)
    return out.reshape(*lead, -1)


def _checked(n_in: int, n_out: int) -> None:
    if min(n_in, n_out) < 2:
        raise ValueError("n_in and n_out must be at least 2 (points to interpolate between)")


class Banded(nn.Module):
    """x -> tanh(x) * x, sampled at M points: a banded (M, N) Jacobian."""

    accepts_batch = True

    def __init__(self, n_in: int = 64, n_out: int = 64) -> None:
        super().__init__()
        _checked(n_in, n_out)
        self.input_shape = (n_in,)
        self.n_out = n_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _resampled((torch.tanh(x) * x).unsqueeze(-2), self.n_out)


class Conv(nn.Module):
    """conv1d (1 -> channels, kernel 5), tanh, conv1d (channels -> 1, kernel 5), sampled at M
    points: a banded (M, N) Jacobian, each output reaching 9 inputs, at a convolution's cost."""

    accepts_batch = True

    def __init__(self, n_in: int = 64, n_out: int = 64, channels: int = 8) -> None:
        super().__init__()
        _checked(n_in, n_out)
        if channels < 1:
            raise ValueError("channels must be at least 1")
        self.input_shape = (n_in,)
        self.n_out = n_out
        self.inner = nn.Conv1d(1, channels, 5, padding=2)
        self.outer = nn.Conv1d(channels, 1, 5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = x.reshape(-1, 1, x.shape[-1])
        y = self.outer(torch.tanh(self.inner(y)))
        return _resampled(y, self.n_out).reshape(*lead, self.n_out)
