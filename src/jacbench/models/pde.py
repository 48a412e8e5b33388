"""A discretised PDE residual: steady viscous Burgers on n interior grid points.

F(u)_i = u_i (u_{i+1} - u_{i-1}) / (2 dx) - nu (u_{i+1} - 2 u_i + u_{i-1}) / dx^2, with
u = 0 on both boundaries. The Jacobian is square (n x n) and tridiagonal: what Newton
solvers need, and where forward mode, reverse mode and differences all cost n passes.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Burgers1D(nn.Module):
    accepts_batch = True

    def __init__(self, n: int = 64, nu: float = 0.05) -> None:
        super().__init__()
        if n < 2 or nu <= 0:
            raise ValueError(f"need n >= 2 grid points and nu > 0, got n={n}, nu={nu}")
        self.input_shape = (n,)
        self.nu = nu
        self.dx = 1.0 / (n + 1)

    def sample_input(self, gen: torch.Generator) -> torch.Tensor:
        grid = torch.arange(1, self.input_shape[0] + 1, dtype=torch.float64) * self.dx
        noise = torch.randn(self.input_shape, generator=gen, dtype=torch.float64)
        return torch.sin(math.pi * grid) + 0.1 * noise

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        padded = nn.functional.pad(u, (1, 1))
        left, right = padded[..., :-2], padded[..., 2:]
        convection = u * (right - left) / (2 * self.dx)
        diffusion = self.nu * (right - 2 * u + left) / self.dx**2
        return convection - diffusion

    def analytic_jacobian(self, u: torch.Tensor) -> torch.Tensor:
        padded = nn.functional.pad(u, (1, 1))
        left, right = padded[:-2], padded[2:]
        stiff = self.nu / self.dx**2
        main = (right - left) / (2 * self.dx) + 2 * stiff
        upper = u[:-1] / (2 * self.dx) - stiff
        lower = -u[1:] / (2 * self.dx) - stiff
        return torch.diag(main) + torch.diag(upper, 1) + torch.diag(lower, -1)
