"""Strategies from ``torch.func``: vmapped reverse (jacrev) and forward (jacfwd) mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, strategy


@dataclass
class JacrevOptions:
    chunk_size: int | None = None  # rows per vmapped batch; None = all at once

    def __post_init__(self) -> None:
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(
                f"chunk_size must be a positive integer or null, got {self.chunk_size}"
            )


RANDOMNESS = ("error", "different", "same")


@dataclass
class JacfwdOptions:
    randomness: str = "error"  # how vmap treats random ops (dropout): error, different, same

    def __post_init__(self) -> None:
        if self.randomness not in RANDOMNESS:
            raise ValueError(
                f"randomness must be one of {', '.join(RANDOMNESS)}, got {self.randomness!r}"
            )


def per_point(problem: Problem, jac_fn: Callable) -> Callable:
    """A per-point Jacobian function, vmapped over the samples when the problem is a batch."""
    return torch.func.vmap(jac_fn) if problem.batch > 1 else jac_fn


def value_and_jacobian(transform: Callable, f: Callable, **options: object) -> Callable:
    """``x -> (f(x), J(x))`` by ``transform`` (torch.func.jacrev or jacfwd) of f with f(x)
    as its auxiliary output: the value comes from the Jacobian's own forward pass, not a
    second call of f."""

    def value_as_aux(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value = f(x)
        return value, value

    both = transform(value_as_aux, has_aux=True, **options)

    def value_and_jac(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        jac, value = both(x)
        return value, jac

    return value_and_jac


def with_value(problem: Problem, transform: Callable, **options: object) -> Declared:
    """``transform`` of f, and f's value with its Jacobian from one pass."""
    return Declared(
        per_point(problem, transform(problem.f, **options)),
        value_and_jac=per_point(problem, value_and_jacobian(transform, problem.f, **options)),
    )


@strategy(Kind.EXACT, Mode.REVERSE, options=JacrevOptions, batch=True)
def jacrev(problem: Problem, opts: JacrevOptions):
    """torch.func.jacrev: vmap over vector-Jacobian products."""
    return with_value(problem, torch.func.jacrev, chunk_size=opts.chunk_size)


@strategy(Kind.EXACT, Mode.FORWARD, options=JacfwdOptions, batch=True)
def jacfwd(problem: Problem, opts: JacfwdOptions):
    """torch.func.jacfwd: vmap over Jacobian-vector products."""
    return with_value(problem, torch.func.jacfwd, randomness=opts.randomness)
