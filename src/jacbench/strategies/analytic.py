"""The model's own formula for its Jacobian (the 'hand formula' of seed 002)."""

from __future__ import annotations

from jacbench.problem import Problem
from jacbench.strategy import Kind, Mode, NoOptions, StrategySkip, strategy


@strategy(Kind.EXACT, Mode.ANALYTIC)
def analytic(problem: Problem, opts: NoOptions):
    """The model's analytic_jacobian(x), where it defines one."""
    if problem.analytic is None:
        raise StrategySkip(
            f"model {problem.name!r} (wrt={problem.wrt}) has no analytic Jacobian; "
            "only models that define analytic_jacobian(x) support strategy=analytic"
        )
    shape = (problem.n_out, problem.n_in)
    return lambda: problem.analytic(problem.x).reshape(shape)
