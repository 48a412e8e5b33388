"""jacfwd with its tangent batch folded into matrix products (``jacbench.core.fold``):
the forward-mode graph is traced once, its broadcast batched products become plain ones,
and the graph runs as it is (eager: no vmap left to interpret at each call) or compiled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, strategy
from jacbench.strategies import func
from jacbench.strategies.compiled import COMPILE_MODES, STORMS, retraced
from jacbench.strategies.func import per_point


@dataclass
class FoldedOptions:
    compile: bool = True  # torch.compile the folded graph (else it runs eagerly)
    mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune
    # a graph traced again at nearly every call (what f reads keeps changing): warn once and
    # go on, or raise RetraceStorm (auto then goes back to its eager tier)
    on_retrace_storm: str = "warn"

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COMPILE_MODES)}, got {self.mode!r}")
        if self.on_retrace_storm not in STORMS:
            raise ValueError(
                f"on_retrace_storm must be one of {', '.join(STORMS)}, "
                f"got {self.on_retrace_storm!r}"
            )


def value_and_jacobian(problem: Problem) -> Callable:
    """(f(x), J(x)) of the problem's point(s) by jacfwd, the value from the same pass."""
    return per_point(problem, func.value_and_jacobian(torch.func.jacfwd, problem.f))


@strategy(Kind.EXACT, Mode.FORWARD, options=FoldedOptions, batch=True)
def jacfwd_folded(problem: Problem, opts: FoldedOptions):
    """Forward mode traced once, tangents folded into matmuls; compiled by default."""
    both = retraced(
        problem, value_and_jacobian(problem), opts.compile, opts.mode, opts.on_retrace_storm
    )

    def value_and_jac(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value, jac = both(x)
        return value, jac

    return Declared(lambda x: both(x)[1], value_and_jac=value_and_jac)
