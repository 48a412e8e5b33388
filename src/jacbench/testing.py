"""The contract every registered strategy keeps, as checks a plugin author can run.

``python -m jacbench.check NAME`` runs them on any installed strategy (``jacbench.check``);
jacbench's own test suite runs the same checks on every registered strategy. A check
prepares the strategy with its declared ``test_options`` (``@strategy(..., test_options=)``:
cheaper settings for expensive defaults, e.g. auto without compiling) and raises
``ContractError`` with what went wrong; ``StrategySkip`` from the strategy is a skip where the
contract allows one (``analytic`` without a formula, a batch without ``batch=True``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch

from jacbench.benchmark.problems import build_problem
from jacbench.core.enums import Kind, Mode
from jacbench.core.errors import PointMismatch, StrategySkip
from jacbench.core.problem import Problem
from jacbench.core.registry import Registry, load_registry

CPU = torch.device("cpu")
MLP = {"_target_": "jacbench.models.mlp.MLP", "n_in": 6, "hidden": 9, "n_out": 4, "depth": 2}
# The small problems of the contract: inputs, parameters, a formula, a batch of points.
PROBLEMS: dict[str, dict] = {
    "mlp": MLP,
    "mlp-params": {**MLP, "wrt": "params"},
    "reciprocal": {"_target_": "jacbench.models.toy.Reciprocal", "n": 5},
    "mlp-batch3": {**MLP, "batch": 3},
}
# Relative Frobenius error allowed at float64: exact strategies to rounding, approximate ones
# (finite differences) to their truncation error on these small problems.
TOLERANCE = {Kind.EXACT: 1e-12, Kind.APPROXIMATE: 1e-6}


class ContractError(AssertionError):
    """A strategy broke the contract: the message says where and how."""


class Outcome(str, Enum):
    PASSED = "passed"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True)
class CheckResult:
    check: str
    outcome: Outcome
    detail: str = ""


def rel_err(jac: torch.Tensor, reference: torch.Tensor) -> float:
    """Relative Frobenius error, computed in float64 (the reference's dtype)."""
    return float(torch.linalg.norm(jac.double() - reference) / torch.linalg.norm(reference))


def jacobian_at(problem: Problem, x: torch.Tensor) -> torch.Tensor:
    """Reverse mode at any point ``x`` (per sample for a batch): the contract's reference."""
    jac = torch.func.jacrev(problem.f)
    return torch.func.vmap(jac)(x) if problem.batch > 1 else jac(x)


def prepare_for_contract(name: str, problem: Problem, registry: Registry | None = None):
    """``name`` prepared with its declared ``test_options``."""
    registry = registry or load_registry()
    return registry.prepare(name, problem, **registry.get(name).test_options)


def problem(key: str, dtype: torch.dtype = torch.float64) -> Problem:
    return build_problem(PROBLEMS[key], dtype, CPU, seed=0)


def _may_skip(name: str, prob: Problem, registry: Registry) -> bool:
    spec = registry.get(name)
    return spec.mode is Mode.ANALYTIC or (prob.batch > 1 and not spec.batch)


def right_at_two_points(name: str, key: str, registry: Registry | None = None) -> None:
    """Prepared once, right at its own point and at another one (nothing of the example
    point kept); the negative control wrong at both."""
    registry = registry or load_registry()
    spec, prob = registry.get(name), problem(key)
    try:
        prep = prepare_for_contract(name, prob, registry)
    except StrategySkip as exc:
        if not _may_skip(name, prob, registry):
            raise ContractError(f"{name} skipped {key}, which it must handle: {exc}") from exc
        raise
    second = prob.x + 0.3 * torch.randn(prob.x.shape, generator=torch.Generator().manual_seed(1))
    for where, x in (("its own point", prob.x), ("a second point", second.to(prob.x))):
        jac, expected = prep(x), jacobian_at(prob, x)
        if jac.shape != expected.shape:
            raise ContractError(
                f"{name} on {key} at {where}: shape {tuple(jac.shape)}, "
                f"expected {tuple(expected.shape)}"
            )
        if jac.requires_grad:
            raise ContractError(f"{name} on {key}: the Jacobian requires grad (a live graph)")
        error = rel_err(jac, expected)
        if spec.kind is Kind.NEGATIVE_CONTROL:
            if error <= 1e-3:
                raise ContractError(f"{name} is a negative control but was right on {key}")
        elif error >= TOLERANCE[spec.kind]:
            raise ContractError(
                f"{name} on {key} at {where}: relative error {error:.2e} "
                f"over {TOLERANCE[spec.kind]:.0e}"
            )


def refuses_another_point(name: str, registry: Registry | None = None) -> None:
    """A point of another shape is refused with a message naming both."""
    prob = problem("mlp")
    prep = prepare_for_contract(name, prob, registry)  # a StrategySkip is a skip
    try:
        prep(torch.zeros(prob.n_in + 1, dtype=prob.dtype))
    except PointMismatch:
        return
    raise ContractError(f"{name} accepted a point of another shape")


def checks(name: str, registry: Registry | None = None) -> dict[str, Callable[[], None]]:
    """The contract's checks of one strategy, by name."""
    registry = registry or load_registry()
    out: dict[str, Callable[[], None]] = {
        f"right_at_two_points[{key}]": functools.partial(right_at_two_points, name, key, registry)
        for key in PROBLEMS
    }
    out["refuses_another_point"] = lambda: refuses_another_point(name, registry)
    return out


def run_contract(name: str, registry: Registry | None = None) -> list[CheckResult]:
    """Every check of ``name``, each passed, skipped (with why) or failed (with why)."""
    results = []
    for check, run in checks(name, registry).items():
        try:
            run()
        except StrategySkip as exc:
            results.append(CheckResult(check, Outcome.SKIPPED, str(exc)))
        except Exception as exc:  # a broken strategy fails its check, not the command
            detail = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            results.append(CheckResult(check, Outcome.FAILED, detail))
        else:
            results.append(CheckResult(check, Outcome.PASSED))
    return results
