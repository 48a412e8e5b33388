"""Discretised PDE residuals: sparse Jacobians, with their patterns declared.

Burgers1D: steady viscous Burgers on n interior grid points.

F(u)_i = u_i (u_{i+1} - u_{i-1}) / (2 dx) - nu (u_{i+1} - 2 u_i + u_{i-1}) / dx^2, with
u = 0 on both boundaries. The Jacobian is square (n x n) and tridiagonal: what Newton
solvers need, and where forward mode, reverse mode and differences all cost n passes.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def banded_pattern(n: int, half_width: int) -> torch.Tensor:
    """A sparse (n, n) COO tensor of ones on the diagonals -half_width..half_width."""
    i = torch.arange(n)
    offsets = torch.arange(-half_width, half_width + 1)
    rows, cols = i.repeat(len(offsets)), (i.unsqueeze(0) + offsets.unsqueeze(1)).reshape(-1)
    keep = (cols >= 0) & (cols < n)
    indices = torch.stack([rows[keep], cols[keep]])
    ones = torch.ones(indices.shape[1])
    return torch.sparse_coo_tensor(indices, ones, (n, n), check_invariants=True)


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

    def jacobian_sparsity(self) -> torch.Tensor:
        """The tridiagonal pattern, as a sparse (n, n) tensor: sparse strategies use it
        instead of detecting one."""
        return banded_pattern(self.input_shape[0], 1)


class Laplacian2D(nn.Module):
    """A nonlinear 2-D residual (Bratu): F(u) = -Laplacian_h(u) - lam exp(u) on an n x n grid
    with u = 0 on the boundary. The 5-point stencil gives a Jacobian with 5 nonzeros a row."""

    accepts_batch = True

    def __init__(self, n: int = 8, lam: float = 1.0) -> None:
        super().__init__()
        if n < 2:
            raise ValueError(f"need n >= 2 grid points a side, got n={n}")
        self.input_shape = (n, n)
        self.lam = lam
        self.h = 1.0 / (n + 1)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        p = nn.functional.pad(u, (1, 1, 1, 1))
        neighbours = p[..., :-2, 1:-1] + p[..., 2:, 1:-1] + p[..., 1:-1, :-2] + p[..., 1:-1, 2:]
        return (4 * u - neighbours) / self.h**2 - self.lam * torch.exp(u)

    def analytic_jacobian(self, u: torch.Tensor) -> torch.Tensor:
        """(4 I - adjacency) / h^2 - lam diag(exp(u)), dense (the reference)."""
        rows, cols = self.jacobian_sparsity().coalesce().indices()
        jac = torch.zeros(u.numel(), u.numel(), dtype=u.dtype, device=u.device)
        jac[rows, cols] = -1.0 / self.h**2
        jac.diagonal().copy_(4.0 / self.h**2 - self.lam * torch.exp(u.reshape(-1)))
        return jac

    def jacobian_sparsity(self) -> torch.Tensor:
        """The 5-point stencil on the row-major flattened grid, as a sparse (n^2, n^2) tensor."""
        n = self.input_shape[0]
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        rows, cols = [], []
        for di, dj in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)):
            ok = (i + di >= 0) & (i + di < n) & (j + dj >= 0) & (j + dj < n)
            rows.append((i * n + j)[ok])
            cols.append(((i + di) * n + (j + dj))[ok])
        indices = torch.stack([torch.cat(rows), torch.cat(cols)])
        ones = torch.ones(indices.shape[1])
        return torch.sparse_coo_tensor(indices, ones, (n * n, n * n), check_invariants=True)
