"""What a Jacobian strategy is, and the decorator that turns one function into one.

A strategy is split into a setup step (``prepare``: build the vmapped or compiled callable,
check that it applies) and the zero-argument callable it returns, which is what gets timed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from jacbench.problem import Problem

JacobianFn = Callable[[], torch.Tensor]


class Kind(str, Enum):
    """How the answer relates to the true Jacobian; sets the tolerance of the verdict."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    NEGATIVE_CONTROL = "negative_control"  # wrong by design, kept to show a pitfall


class Mode(str, Enum):
    REVERSE = "reverse"
    FORWARD = "forward"
    NUMERIC = "numeric"
    ANALYTIC = "analytic"
    AUTO = "auto"  # picks another strategy; the result records which (chosen_strategy)


class StrategySkip(Exception):
    """Raised by ``prepare`` when a strategy cannot apply to this problem, dtype or device."""


@dataclass
class NoOptions:
    """Options of a strategy that has none."""


@dataclass(frozen=True)
class StrategySpec:
    """One registered way to compute a Jacobian."""

    name: str
    kind: Kind
    mode: Mode
    prepare: Callable[[Problem, Any], JacobianFn]
    options: type = NoOptions
    doc: str = ""
    batch: bool = False  # computes per-sample Jacobians (B, M, N) when problem.batch > 1

    def make_options(self, values: dict[str, Any]) -> Any:
        """Build the typed options; their ``__post_init__`` validates the values."""
        known = {f.name for f in dataclasses.fields(self.options)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"strategy {self.name!r} has no option(s) {unknown}; "
                f"valid options: {sorted(known) or 'none'}"
            )
        return self.options(**values)


def strategy(
    kind: Kind | str, mode: Mode | str, options: type = NoOptions, batch: bool = False
) -> Callable[[Callable[[Problem, Any], JacobianFn]], StrategySpec]:
    """Decorate ``prepare(problem, opts) -> jac`` to make it a strategy.

    The strategy's name is the function's name; register it with one entry-point line in the
    ``jacbench.strategies`` group. ``batch=True`` declares that it handles problems with
    several independent points (``problem.batch`` > 1); others are skipped there.
    """
    if not dataclasses.is_dataclass(options):
        raise TypeError("options must be a dataclass whose fields all have defaults")

    def wrap(prepare: Callable[[Problem, Any], JacobianFn]) -> StrategySpec:
        return StrategySpec(
            name=prepare.__name__,
            kind=Kind(kind),
            mode=Mode(mode),
            prepare=prepare,
            options=options,
            batch=batch,
            doc=(prepare.__doc__ or "").strip().splitlines()[0] if prepare.__doc__ else "",
        )

    return wrap
