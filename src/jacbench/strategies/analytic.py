"""The model's own formula for its Jacobian (the 'hand formula' of seed 002)."""

from __future__ import annotations

import torch

from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, NoOptions, StrategySkip, strategy


@strategy(Kind.EXACT, Mode.ANALYTIC, batch=True)
def analytic(problem: Problem, opts: NoOptions):
    """The model's analytic_jacobian(x), where it defines one."""
    formula = problem.analytic
    if formula is None:
        raise StrategySkip(
            f"model {problem.name!r} (wrt={problem.wrt}) has no analytic Jacobian; "
            "only models that define analytic_jacobian(x) support strategy=analytic"
        )

    def jac(x: torch.Tensor) -> torch.Tensor:
        points = x.reshape(problem.batch, problem.n_in)
        return torch.stack([formula(p) for p in points]).reshape(problem.jacobian_shape)

    return jac
