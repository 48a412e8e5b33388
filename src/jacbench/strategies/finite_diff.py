"""Finite differences: approximate Jacobians from forward passes only."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from jacbench.numerics import machine_eps
from jacbench.problem import Problem
from jacbench.strategy import Kind, Mode, strategy


@dataclass
class FdOptions:
    # Relative step: h_j = eps * max(1, |x_j|). null picks the textbook optimum for the
    # dtype: sqrt(machine eps) for forward, cbrt(machine eps) for central differences.
    eps: float | None = None

    def __post_init__(self) -> None:
        if self.eps is not None and not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be a positive number or null, got {self.eps}")


def default_eps(dtype: torch.dtype, central: bool) -> float:
    return machine_eps(dtype) ** (1 / 3 if central else 1 / 2)


def _steps(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-coordinate steps, rounded so that x + h - x == h exactly in x's dtype."""
    h = eps * torch.clamp(x.abs(), min=1.0)
    return (x + h) - x


def _prepare(problem: Problem, opts: FdOptions, central: bool):
    eps = opts.eps if opts.eps is not None else default_eps(problem.dtype, central)
    f, x = problem.f, problem.x
    n = problem.n_in

    def evaluate(points: torch.Tensor) -> torch.Tensor:
        """f at each row of ``points``: one batched pass where the model allows it."""
        if problem.f_batched is not None:
            return problem.f_batched(points)
        return torch.stack([f(p) for p in points])

    def jac() -> torch.Tensor:
        with torch.no_grad():
            h = _steps(x, eps)
            step = torch.diag(h)
            if central:
                values = evaluate(torch.cat([x + step, x - step]))
                diff = (values[:n] - values[n:]) / (2 * h[:, None])
            else:
                values = evaluate(torch.cat([x.unsqueeze(0), x + step]))
                diff = (values[1:] - values[0]) / h[:, None]
            return diff.T

    return jac


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=FdOptions)
def fd_forward(problem: Problem, opts: FdOptions):
    """Forward differences (f(x + h e_j) - f(x)) / h: N + 1 evaluations."""
    return _prepare(problem, opts, central=False)


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=FdOptions)
def fd_central(problem: Problem, opts: FdOptions):
    """Central differences (f(x + h e_j) - f(x - h e_j)) / 2h: 2N evaluations."""
    return _prepare(problem, opts, central=True)
