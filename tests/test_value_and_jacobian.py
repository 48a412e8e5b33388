"""``prep.value_and_jacobian(x)`` (issue 33): ``(f(x), J)`` for every strategy, from the
Jacobian's own pass where the strategy offers it (forward and reverse mode), so that a
Levenberg-Marquardt step does not evaluate f twice."""

from __future__ import annotations

import pytest
import torch

import jacbench
from helpers.contract import compiles
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import reference_jacobian
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind, StrategySkip

REGISTRY = load_registry()
MLP = {"_target_": "jacbench.models.mlp.MLP", "n_in": 4, "hidden": 6, "n_out": 3}
CPU = torch.device("cpu")
EAGER = [n for n in sorted(REGISTRY.strategies) if not compiles(n)]


@pytest.mark.parametrize("name", EAGER)
def test_every_strategy_gives_the_value_with_its_jacobian(name):
    problem = build_problem(MLP, torch.float64, CPU, seed=0)
    options = {"compile": False} if name == "auto" else {}
    try:
        prep = REGISTRY.prepare(name, problem, **options)
    except StrategySkip:
        pytest.skip(f"{name} does not apply to this problem")
    value, jac = prep.value_and_jacobian(problem.x)
    assert torch.equal(value, problem.f(problem.x))
    if REGISTRY.get(name).kind is Kind.EXACT:
        reference, _ = reference_jacobian(problem)
        assert torch.allclose(jac, reference, rtol=1e-10, atol=1e-12)
    assert torch.equal(jac, prep(problem.x))  # the same Jacobian as a plain call


@pytest.mark.parametrize("name", ["jacfwd", "jacrev"])
def test_forward_and_reverse_mode_evaluate_f_once(name):
    calls = []

    def f(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return torch.stack([x.sin().sum(), (x * x).prod()])

    x = torch.randn(2, 3, dtype=torch.float64)
    prep = jacbench.prepare(f, x, name)
    assert prep.one_pass
    prep(x)  # the first call, checked against reverse mode (which evaluates f once more)
    calls.clear()
    value, jac = prep.value_and_jacobian(x)
    assert len(calls) == 1  # vmap traces f once for all tangents
    assert value.shape == (2,) and jac.shape == (2, 2, 3)
    assert torch.allclose(value, f(x)) and torch.allclose(jac, torch.func.jacrev(f)(x))


def test_a_batch_gives_one_value_per_point():
    problem = build_problem({**MLP, "batch": 3}, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare("jacfwd", problem)
    value, jac = prep.value_and_jacobian(problem.x)
    assert value.shape == (3, 3) and jac.shape == (3, 3, 4)
    assert torch.allclose(value, problem.f_many(problem.x))


@pytest.mark.parametrize("name", ["jacfwd", "fd_central"])  # one pass, and f beside J
def test_a_non_finite_jacobian_is_reported_as_prep_x_reports_it(name):
    x = torch.tensor([0.0, 1.0, 4.0], dtype=torch.float64)  # sqrt' is infinite at 0
    prep = jacbench.prepare(torch.sqrt, x, name)
    with pytest.warns(jacbench.NonFiniteJacobian, match="NaN or infinite entries of 9"):
        value, _ = prep.value_and_jacobian(x)
    assert torch.equal(value, torch.sqrt(x))
