"""Forward-mode AD with dual numbers, one input direction per pass."""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

from jacbench.problem import Problem
from jacbench.strategy import Kind, Mode, NoOptions, strategy


@strategy(Kind.EXACT, Mode.FORWARD)
def forward_ad_loop(problem: Problem, opts: NoOptions):
    """A loop of forward passes on dual numbers, one Jacobian column each."""
    directions = torch.eye(problem.n_in, dtype=problem.dtype, device=problem.device)

    def jac() -> torch.Tensor:
        columns = []
        with fwAD.dual_level():
            for direction in directions:
                out = problem.f(fwAD.make_dual(problem.x, direction))
                tangent = fwAD.unpack_dual(out).tangent
                columns.append(torch.zeros_like(out) if tangent is None else tangent)
        return torch.stack(columns, dim=1)

    return jac
