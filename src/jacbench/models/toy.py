"""Small functions from the forum threads, with their hand-written Jacobians."""

from __future__ import annotations

import torch
from torch import nn


class Reciprocal(nn.Module):
    """x -> 1/x elementwise (seed 002); the hand formula is -1/x**2."""

    accepts_batch = True

    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.input_shape = (n,)

    def sample_input(self, gen: torch.Generator) -> torch.Tensor:
        # away from zero, where 1/x is well conditioned
        x = torch.randn(self.input_shape, generator=gen, dtype=torch.float64)
        return torch.where(x.abs() < 0.1, torch.full_like(x, 0.5), x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1 / x

    def analytic_jacobian(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diag(-1 / x**2)


class CatPoly(nn.Module):
    """q in R^2 -> cat([2q, 4q*q]) (seed 003): four outputs, two inputs."""

    accepts_batch = True
    input_shape = (2,)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return torch.cat([2 * q, 4 * q * q], dim=-1)

    def analytic_jacobian(self, q: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(q.numel(), dtype=q.dtype, device=q.device)
        return torch.cat([2 * eye, torch.diag(8 * q)])
