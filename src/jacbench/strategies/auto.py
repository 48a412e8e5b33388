"""``auto``: pick an exact strategy for this problem, by a rule and a short calibration.

The rule: forward mode (jacfwd) when the Jacobian has at least as many rows as columns
(M >= N: N forward passes beat M backward passes), reverse mode (jacrev) otherwise, compiled
when ``compile`` is on. With ``calibrate`` on (the default) the candidates below are each
prepared and timed briefly, and the fastest is kept; the calibration's cost, compilation
included, is part of first_call_s. The choice is recorded as ``chosen_strategy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils import benchmark

from jacbench.problem import Problem
from jacbench.strategy import JacobianFn, Kind, Mode, StrategySkip, strategy

EAGER = ("jacfwd", "jacrev", "grads_batched")
COMPILED = ("jacfwd_compiled", "jacrev_compiled")


@dataclass
class AutoOptions:
    compile: bool = True  # consider torch.compile'd candidates
    calibrate: bool = True  # time the candidates and keep the fastest; else the rule alone
    calibration_time: float = 0.05  # seconds of timed calls per candidate

    def __post_init__(self) -> None:
        if not (math.isfinite(self.calibration_time) and self.calibration_time > 0):
            raise ValueError(f"calibration_time must be > 0, got {self.calibration_time}")


def rule(problem: Problem, compile: bool) -> str:
    """The strategy the shape alone suggests."""
    name = "jacfwd" if problem.n_out >= problem.n_in else "jacrev"
    return f"{name}_compiled" if compile else name


def _prepare_named(name: str, problem: Problem) -> JacobianFn:
    from jacbench.registry import load_registry  # the registry is built by now

    spec = load_registry().get(name)
    return spec.prepare(problem, spec.make_options({}))


def _median_seconds(jac: JacobianFn, seconds: float) -> float:
    timer = benchmark.Timer(stmt="jac()", globals={"jac": jac}, num_threads=torch.get_num_threads())
    return float(timer.blocked_autorange(min_run_time=seconds).median)


def choose(problem: Problem, opts: AutoOptions) -> tuple[str, JacobianFn]:
    preferred = rule(problem, opts.compile)
    if not opts.calibrate:
        try:
            return preferred, _prepare_named(preferred, problem)
        except StrategySkip:  # compilation unavailable: the same mode, eager
            eager = rule(problem, compile=False)
            return eager, _prepare_named(eager, problem)
    timings: dict[str, tuple[float, JacobianFn]] = {}
    for name in (*EAGER, *(COMPILED if opts.compile else ())):
        try:
            jac = _prepare_named(name, problem)
            jac()
            timings[name] = (_median_seconds(jac, opts.calibration_time), jac)
        except Exception:  # a candidate that cannot run here is simply not chosen
            continue
    if not timings:
        raise StrategySkip("auto: none of its candidates can compute this Jacobian")
    best = min(timings, key=lambda n: timings[n][0])
    return best, timings[best][1]


@strategy(Kind.EXACT, Mode.AUTO, options=AutoOptions, batch=True)
def auto(problem: Problem, opts: AutoOptions):
    """The fastest exact strategy for this problem, chosen by rule and calibration."""
    name, inner = choose(problem, opts)

    def jac() -> torch.Tensor:
        return inner()

    jac.chosen_strategy = name  # type: ignore[attr-defined]
    return jac
