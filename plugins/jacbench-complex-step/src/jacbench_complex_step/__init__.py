"""Complex-step differentiation as a jacbench strategy (an outside plugin)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from jacbench import Kind, Mode, Problem, StrategySkip, strategy

COMPLEX_OF = {
    torch.float32: torch.complex64,
    torch.float64: torch.complex128,
}


@dataclass
class ComplexStepOptions:
    h: float = 1e-20  # imaginary step; no cancellation, so it can be tiny

    def __post_init__(self) -> None:
        if not (math.isfinite(self.h) and self.h > 0):
            raise ValueError(f"h must be a positive number, got {self.h}")


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=ComplexStepOptions)
def complex_step(problem: Problem, opts: ComplexStepOptions):
    """Im f(x + i h e_j) / h, one complex forward pass over all N directions."""
    if problem.dtype not in COMPLEX_OF:
        raise StrategySkip(
            f"complex step needs float32 or float64, not {problem.dtype}"
            " (there is no complex half precision)"
        )
    try:  # casting evaluates f once in complex arithmetic
        complex_problem = problem.cast(COMPLEX_OF[problem.dtype])
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        raise StrategySkip(
            f"complex step needs every op of model {problem.name!r} to accept complex input: "
            f"{str(exc).splitlines()[0]}"
        ) from exc
    complex_dtype = complex_problem.dtype
    directions = 1j * opts.h * torch.eye(problem.n_in, dtype=complex_dtype, device=problem.device)

    def jac(x: torch.Tensor) -> torch.Tensor:
        # the point is taken at each call: nothing of the example point is kept
        points = x.to(complex_dtype) + directions
        values = complex_problem.f_many(points)  # one pass where the model allows
        return (values.imag / opts.h).T.to(problem.dtype)

    return jac
