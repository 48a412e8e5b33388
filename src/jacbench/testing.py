"""The contract every registered strategy keeps, as checks a plugin author can run.

``python -m jacbench.check NAME`` runs them on any installed strategy; jacbench's own suite
runs the same checks on every registered strategy. A check prepares the strategy with its
declared ``test_options`` and raises ``ContractError`` with what went wrong; ``StrategySkip``
is a skip where the contract allows one (``analytic`` without a formula, a batch without
``batch=True``). The problems are plain torch, each with its expected Jacobian (a formula, or
reverse mode in float64), so the contract needs the library alone: no Hydra, no benchmark.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from jacbench.core.enums import Kind, Mode
from jacbench.core.errors import PointMismatch, StrategySkip, one_line
from jacbench.core.problem import Problem, make_problem
from jacbench.core.registry import Registry, load_registry

CPU = torch.device("cpu")
# Relative Frobenius error allowed at float64: exact strategies to rounding, approximate ones
# (finite differences) to their truncation error on these small problems.
TOLERANCE = {Kind.EXACT: 1e-12, Kind.APPROXIMATE: 1e-6}


class TanhMLP(nn.Sequential):
    """Linear and tanh layers, weights drawn from ``seed`` (the global RNG left alone)."""

    accepts_batch = True
    input_shape: tuple[int, ...]

    def __init__(self, sizes: tuple[int, ...], seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        layers: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
            linear = nn.Linear(n_in, n_out, dtype=torch.float64)
            with torch.no_grad():
                linear.weight.copy_(torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in))
                linear.bias.copy_(0.1 * torch.randn(n_out, generator=gen))
            layers += [linear, nn.Tanh()]
        super().__init__(*layers[:-1])  # no tanh after the last layer
        self.input_shape = (sizes[0],)

    def chain_rule(self, x: torch.Tensor) -> torch.Tensor:
        """The Jacobian by hand at one point: W_k diag(1 - tanh^2) ... W_1."""
        jac, h = torch.eye(x.numel(), dtype=x.dtype, device=x.device), x
        for layer in self:
            if isinstance(layer, nn.Linear):
                jac, h = layer.weight @ jac, layer(h)
            else:
                h = torch.tanh(h)
                jac = (1 - h**2)[:, None] * jac
        return jac


class Reciprocal(nn.Module):
    """x -> 1/x, with its formula: the analytic strategy's problem."""

    accepts_batch = True
    input_shape: tuple[int, ...]

    def __init__(self, n: int) -> None:
        super().__init__()
        self.input_shape = (n,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1 / x

    def analytic_jacobian(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diag(-1 / x**2)


def _reciprocal_jacobian(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.diag(-(x**-2))


def _chain_rule(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    assert isinstance(module, TanhMLP)
    return module.chain_rule(x)


@dataclass(frozen=True)
class Scenario:
    """One problem of the contract: a plain torch module at a seeded point, w.r.t. its input
    or its parameters, one point or a batch, and its expected Jacobian at one point
    (``None``: reverse mode in float64)."""

    make: Callable[[], TanhMLP | Reciprocal]
    expected: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None
    wrt: str = "input"
    batch: int = 1

    def problem(self, key: str, dtype: torch.dtype, device: torch.device) -> Problem:
        module = self.make().to(device=device, dtype=dtype).eval().requires_grad_(False)
        gen = torch.Generator().manual_seed(0)
        shape = (self.batch, *module.input_shape) if self.batch > 1 else module.input_shape
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        x = torch.where(x.abs() < 0.1, torch.full_like(x, 0.5), x)  # 1/x well conditioned
        has_formula = hasattr(module, "analytic_jacobian")
        return make_problem(key, module, x.to(device, dtype), self.wrt, has_formula, self.batch)


def _mlp() -> TanhMLP:
    return TanhMLP((6, 9, 9, 4))


# The small problems of the contract: inputs, parameters, a formula, a batch of points.
PROBLEMS: dict[str, Scenario] = {
    "mlp": Scenario(_mlp, _chain_rule),
    "mlp-params": Scenario(_mlp, None, wrt="params"),
    "reciprocal": Scenario(functools.partial(Reciprocal, 5), _reciprocal_jacobian),
    "mlp-batch3": Scenario(_mlp, _chain_rule, batch=3),
}


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
    """Reverse mode at any point ``x`` (per sample for a batch): a float64 reference."""
    jac = torch.func.jacrev(problem.f)
    return torch.func.vmap(jac)(x) if problem.batch > 1 else jac(x)


def expected_at(key: str, problem: Problem, x: torch.Tensor) -> torch.Tensor:
    """The expected Jacobian of the contract's problem ``key`` at ``x``, in float64."""
    exact = problem if problem.dtype == torch.float64 else problem.cast(torch.float64)
    formula, x = PROBLEMS[key].expected, x.double()
    if formula is None:
        return jacobian_at(exact, x)
    jac = torch.stack([formula(exact.module, p) for p in x.reshape(exact.batch, exact.n_in)])
    return jac if exact.batch > 1 else jac[0]


def prepare_for_contract(name: str, problem: Problem, registry: Registry | None = None):
    """``name`` prepared with its declared ``test_options``."""
    registry = registry or load_registry()
    return registry.prepare(name, problem, **registry.get(name).test_options)


def problem(key: str, dtype: torch.dtype = torch.float64, device: torch.device = CPU) -> Problem:
    """The contract's problem ``key`` (one of PROBLEMS) in ``dtype`` on ``device``."""
    return PROBLEMS[key].problem(key, dtype, device)


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
        jac, expected = prep(x), expected_at(key, prob, x)
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
            detail = f"{type(exc).__name__}: {one_line(exc)}"
            results.append(CheckResult(check, Outcome.FAILED, detail))
        else:
            results.append(CheckResult(check, Outcome.PASSED))
    return results
