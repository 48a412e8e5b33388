"""torch.compile around torch.func.jacfwd / jacrev: exact Jacobians with the overheads of
the Python-level transforms compiled away. Compilation happens in ``prepare``, so its cost
lands in first_call_s and never in the steady-state time."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.problem import Problem
from jacbench.strategies.func import per_point
from jacbench.strategy import Kind, Mode, StrategySkip, strategy

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# jacfwd/jacrev wrappers share their code objects across problems: with the default cache
# limit (8) a sweep would silently fall back to eager after a few problems.
CACHE_LIMIT = 256


@dataclass
class CompileOptions:
    mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COMPILE_MODES)}, got {self.mode!r}")


def _raise_cache_limits() -> None:
    config = torch._dynamo.config
    config.cache_size_limit = max(config.cache_size_limit, CACHE_LIMIT)
    if hasattr(config, "accumulated_cache_size_limit"):
        config.accumulated_cache_size_limit = max(config.accumulated_cache_size_limit, CACHE_LIMIT)


def compile_checked(fn: Callable, x: torch.Tensor, mode: str = "default") -> Callable:
    """``torch.compile(fn)``, compiled now by a first call at ``x``; a failure is a skip."""
    if not hasattr(torch, "compile"):
        raise StrategySkip(f"torch {torch.__version__} has no torch.compile")
    _raise_cache_limits()
    compiled = torch.compile(fn, mode=mode)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # inductor's own deprecations
            compiled(x)
    except Exception as exc:
        reason = " ".join(str(exc).split())[:300]
        raise StrategySkip(f"torch.compile failed here: {type(exc).__name__}: {reason}") from exc
    return compiled


def compiled_jacobian(problem: Problem, transform: Callable, mode: str):
    """Compile ``transform(f)`` (vmapped over the samples of a batch) and run it once."""
    return compile_checked(per_point(problem, transform(problem.f)), problem.x, mode)


@strategy(Kind.EXACT, Mode.FORWARD, options=CompileOptions, batch=True)
def jacfwd_compiled(problem: Problem, opts: CompileOptions):
    """torch.compile(torch.func.jacfwd(f)): forward mode, compiled."""
    return compiled_jacobian(problem, torch.func.jacfwd, opts.mode)


@strategy(Kind.EXACT, Mode.REVERSE, options=CompileOptions, batch=True)
def jacrev_compiled(problem: Problem, opts: CompileOptions):
    """torch.compile(torch.func.jacrev(f)): reverse mode, compiled."""
    return compiled_jacobian(problem, torch.func.jacrev, opts.mode)
