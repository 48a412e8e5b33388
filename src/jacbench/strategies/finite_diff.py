"""Finite differences: approximate Jacobians from forward passes only."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from jacbench.core.numerics import machine_eps
from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, StrategySkip, strategy

# Perturbed points are built and evaluated in chunks of at most this many numbers: no N x N
# matrix for large N, and chunks that stay in cache.
CHUNK_ELEMENTS = 1 << 20


MAX_EPS = 0.1  # relative steps above this are refused: a secant, not a derivative


@dataclass
class FdOptions:
    # Relative step: h_j = eps * max(1, |x_j|). null picks the textbook optimum for the
    # dtype: sqrt(machine eps) for forward, cbrt(machine eps) for central differences.
    eps: float | None = None

    def __post_init__(self) -> None:
        if self.eps is not None and not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be a positive number or null, got {self.eps}")
        if self.eps is not None and self.eps > MAX_EPS:
            raise ValueError(
                f"eps must be at most {MAX_EPS} (a relative step), got {self.eps}: a larger "
                "step measures a secant over a wide interval, not a derivative"
            )


def steps(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-coordinate steps, rounded so that x + h - x == h exactly in x's dtype."""
    h = eps * torch.clamp(x.abs(), min=1.0)
    return (x + h) - x


def step_size(problem: Problem, eps: float | None, central: bool) -> float:
    """The relative step to use (``eps`` of the options; None: the dtype's default), refused
    where the dtype cannot represent x + h."""
    if eps is None:  # the textbook optimum: sqrt (forward) or cbrt (central) of machine eps
        eps = machine_eps(problem.dtype) ** (1 / 3 if central else 1 / 2)
    vanished = int((steps(problem.x, eps) == 0).sum())
    if vanished:
        raise StrategySkip(
            f"eps={eps:g} is below the resolution of {problem.dtype}: x + h == x for "
            f"{vanished} of {problem.x.numel()} coordinates, so the difference quotient is 0/0"
        )
    return eps


def _prepare(problem: Problem, opts: FdOptions, central: bool):
    eps = step_size(problem, opts.eps, central)
    B, N, M = problem.batch, problem.n_in, problem.n_out
    chunk = max(1, CHUNK_ELEMENTS // (B * N * (2 if central else 1)))

    def jac(x: torch.Tensor) -> torch.Tensor:
        X = x.reshape(B, N)
        with torch.no_grad():
            h = steps(X, eps)  # (B, N)
            base = None if central else problem.f_many(X)
            columns = []
            for start in range(0, N, chunk):
                js = torch.arange(start, min(N, start + chunk), device=X.device)
                k, rows = len(js), torch.arange(len(js), device=X.device)
                hk = h[:, js].T  # (k, B): the step of direction j for each sample
                copies = 2 if central else 1
                points = X.expand(copies, k, B, N).clone()
                points[0, rows, :, js] += hk
                if central:
                    points[1, rows, :, js] -= hk
                values = problem.f_many(points.reshape(-1, N)).reshape(copies, k, B, M)
                if base is None:  # central: the second copy stepped back
                    columns.append((values[0] - values[1]) / (2 * hk.unsqueeze(-1)))
                else:
                    columns.append((values[0] - base) / hk.unsqueeze(-1))
            return torch.cat(columns).permute(1, 2, 0).reshape(problem.jacobian_shape)

    return jac


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=FdOptions, batch=True)
def fd_forward(problem: Problem, opts: FdOptions):
    """Forward differences (f(x + h e_j) - f(x)) / h: N + 1 evaluations, in one batched
    pass per chunk where the model accepts a batch, else a loop."""
    return _prepare(problem, opts, central=False)


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=FdOptions)
def fd_forward_loop(problem: Problem, opts: FdOptions):
    """Forward differences one input at a time, a forward pass each: the hand-written loop
    that seed 004's thread compares autograd with."""
    eps = step_size(problem, opts.eps, central=False)
    f = problem.f

    def jac(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = steps(x, eps)
            base = f(x)
            columns = []
            for j in range(problem.n_in):
                shifted = x.clone()
                shifted[j] += h[j]
                columns.append((f(shifted) - base) / h[j])
            return torch.stack(columns, dim=1)

    return jac


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=FdOptions, batch=True)
def fd_central(problem: Problem, opts: FdOptions):
    """Central differences (f(x + h e_j) - f(x - h e_j)) / 2h: 2N evaluations."""
    return _prepare(problem, opts, central=True)
