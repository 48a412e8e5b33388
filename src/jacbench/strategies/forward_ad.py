"""Forward-mode AD with dual numbers, one input direction per pass."""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, NoOptions, strategy
from jacbench.strategies.autograd import per_sample, rows_fn


@strategy(Kind.EXACT, Mode.FORWARD, batch=True)
def forward_ad_loop(problem: Problem, opts: NoOptions):
    """A loop of forward passes on dual numbers, one Jacobian column each."""
    F = rows_fn(problem)
    eye = torch.eye(problem.n_in, dtype=problem.dtype, device=problem.device)
    # direction j for every sample at once
    directions = [e.expand(problem.batch, problem.n_in) for e in eye]

    def jac(x: torch.Tensor) -> torch.Tensor:
        X = x.reshape(problem.batch, problem.n_in)
        columns = []
        with fwAD.dual_level():
            for direction in directions:
                out = F(fwAD.make_dual(X, direction))
                tangent = fwAD.unpack_dual(out).tangent
                columns.append(torch.zeros_like(out) if tangent is None else tangent)
        return per_sample(problem, torch.stack(columns, dim=-1))

    return jac
