"""jacfwd with its tangent batch folded into matrix products (``jacbench.core.fold``):
the forward-mode graph is traced once, its broadcast batched products become plain ones,
and the graph runs as it is (eager: no vmap left to interpret at each call) or compiled."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, strategy
from jacbench.strategies.compiled import COMPILE_MODES, retraced
from jacbench.strategies.func import per_point


@dataclass
class FoldedOptions:
    compile: bool = True  # torch.compile the folded graph (else it runs eagerly)
    mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COMPILE_MODES)}, got {self.mode!r}")


def _value_and_jacobian(problem: Problem):
    """(f(x), J(x)) of one point, by jacfwd with the value as its auxiliary output."""

    def value_as_aux(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value = problem.f(x)
        return value, value

    both = torch.func.jacfwd(value_as_aux, has_aux=True)

    def value_and_jac(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        jac, value = both(x)
        return value, jac

    return per_point(problem, value_and_jac)


@strategy(Kind.EXACT, Mode.FORWARD, options=FoldedOptions, batch=True)
def jacfwd_folded(problem: Problem, opts: FoldedOptions):
    """Forward mode traced once, tangents folded into matmuls; compiled by default."""
    both = retraced(problem, _value_and_jacobian(problem), opts.compile, opts.mode)

    def value_and_jac(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value, jac = both(x)
        return value, jac

    return Declared(lambda x: both(x)[1], value_and_jac=value_and_jac)
