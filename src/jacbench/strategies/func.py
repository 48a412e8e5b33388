"""Strategies from ``torch.func``: vmapped reverse (jacrev) and forward (jacfwd) mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, strategy


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


@strategy(Kind.EXACT, Mode.REVERSE, options=JacrevOptions, batch=True)
def jacrev(problem: Problem, opts: JacrevOptions):
    """torch.func.jacrev: vmap over vector-Jacobian products."""
    return per_point(problem, torch.func.jacrev(problem.f, chunk_size=opts.chunk_size))


@strategy(Kind.EXACT, Mode.FORWARD, options=JacfwdOptions, batch=True)
def jacfwd(problem: Problem, opts: JacfwdOptions):
    """torch.func.jacfwd: vmap over Jacobian-vector products."""
    return per_point(problem, torch.func.jacfwd(problem.f, randomness=opts.randomness))
