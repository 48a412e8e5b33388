"""The model zoo: every shipped model's Jacobian against a float64 reference (and against its
analytic Jacobian where it has one), parameter Jacobians, and per-sample batches."""

from __future__ import annotations

import pytest
import torch
import yaml

from helpers.contract import compiles_or_calibrates, jacobian, rel_err
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import reference_jacobian
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind, StrategySkip
from jacbench.run.config import conf_dir

CPU = torch.device("cpu")
REGISTRY = load_registry()
MODELS = {
    p.stem: yaml.safe_load(p.read_text())
    for p in sorted((conf_dir() / "model").glob("*.yaml"))
    if p.stem not in ("custom", "ba")  # ba: tests/test_adbench.py (dense would take 42 GB)
}
SHAPES = {  # (N, M) the issue and the forum threads name
    "seed000_mlp": (5, 2),
    "seed001_mse_sum": (16800, 1),
    "seed003_cat_poly": (2, 4),
    "seed004_lm": (84, 576),
    "seed004_small": (15, 55),
    "cnn": (144, 10),
    "transformer": (96, 96),
    "burgers": (64, 64),
}
BATCH_AWARE = sorted(n for n, s in REGISTRY.strategies.items() if s.batch and s.kind is Kind.EXACT)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_jacobian_matches_float64_reference(name):
    problem = build_problem(MODELS[name], torch.float64, CPU, seed=0)
    if name in SHAPES:
        assert (problem.n_in, problem.n_out) == SHAPES[name]
    reference, kind = reference_jacobian(problem)
    assert torch.isfinite(reference).all() and reference.abs().max() > 0
    assert rel_err(jacobian("jacrev", problem), reference) < 1e-12
    if problem.analytic is not None:
        assert kind == "analytic"
        assert rel_err(jacobian("autograd_loop", problem), reference) < 1e-12
    if problem.n_in <= 200:  # the independent check: central differences agree
        assert rel_err(jacobian("fd_central", problem), reference) < 1e-6


def test_burgers_jacobian_is_tridiagonal():
    problem = build_problem({**MODELS["burgers"], "n": 200}, torch.float64, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    band = torch.ones(200, 200).triu(-1).tril(1).bool()
    assert (reference[~band] == 0).all() and (reference[band] != 0).all()


def test_seed004_model_is_a_residual_of_84_parameters():
    problem = build_problem(MODELS["seed004_lm"], torch.float32, CPU, seed=0)
    assert problem.wrt == "params" and problem.n_in == 84 and problem.n_out == 576


# compile and calibration on the small model; one full auto test (its defaults: calibration
# and its compiled candidate) on the transformer
FULL_AUTO = ("transformer", "auto")
BATCH_CASES = [
    pytest.param(model, name, marks=pytest.mark.compiles)
    if (model, name) == FULL_AUTO
    else (model, name)
    for model in ["mlp", "cnn", "transformer", "burgers"]
    for name in BATCH_AWARE
    if model == "mlp" or not compiles_or_calibrates(name) or (model, name) == FULL_AUTO
]


@pytest.mark.parametrize(("model", "name"), BATCH_CASES)
def test_per_sample_jacobians_of_a_batch(name, model):
    problem = build_problem({**MODELS[model], "batch": 3}, torch.float64, CPU, seed=0)
    assert problem.x.shape == (3, problem.n_in)
    reference, _ = reference_jacobian(problem)
    try:
        full = (model, name) == FULL_AUTO
        jac = REGISTRY.prepare(name, problem)(problem.x) if full else jacobian(name, problem)
    except StrategySkip as exc:
        # Declining is allowed only with a reason: no formula, or a torch.compile failure
        # (vmap(jacfwd) of the transformer block trips an internal assert in torch 2.13).
        assert (name == "analytic" and "no analytic" in str(exc)) or (
            name.endswith("_compiled") and "torch.compile failed" in str(exc)
        ), exc
        return
    assert jac.shape == (3, problem.n_out, problem.n_in)
    assert rel_err(jac, reference) < 1e-12
    # the samples really differ, so a strategy mixing them up would fail
    assert not torch.allclose(reference[0], reference[1])


EXACT = sorted(
    n for n, s in REGISTRY.strategies.items() if s.kind is Kind.EXACT and n != "analytic"
)


# The transformer's 2224 parameters: no compile or calibration, and no one-by-one forward
# passes (forward_ad_loop): those run on seed004_small's 15 parameters. double_backward's
# second pass one column at a time (~6 s here) is slow.
PARAMETER_CASES = [("seed004_small", n) for n in EXACT] + [
    pytest.param("transformer", n, marks=[pytest.mark.slow] if n == "double_backward" else [])
    for n in EXACT
    if not compiles_or_calibrates(n) and n != "forward_ad_loop"
]


@pytest.mark.parametrize(("model", "name"), PARAMETER_CASES)
def test_parameter_jacobians_across_exact_strategies(name, model):
    problem = build_problem({**MODELS[model], "wrt": "params", "batch": 1}, torch.float64, CPU, 0)
    reference, _ = reference_jacobian(problem)
    assert rel_err(jacobian(name, problem), reference) < 1e-12


def test_forum_sample_inputs():
    seed000 = build_problem(MODELS["seed000_mlp"], torch.float32, CPU, seed=0)
    assert ((seed000.x >= 0) & (seed000.x < 1)).all()  # torch.rand, as in the thread
    reciprocal = build_problem(MODELS["seed002_reciprocal"], torch.float32, CPU, seed=0)
    assert (reciprocal.x.abs() >= 0.1).all()
    summed = build_problem({**MODELS["seed000_mlp"], "reduce": "sum"}, torch.float64, CPU, 0)
    plain = build_problem(MODELS["seed000_mlp"], torch.float64, CPU, seed=0)
    assert torch.allclose(reference_jacobian(summed)[0][0], reference_jacobian(plain)[0].sum(0))


def test_user_callable_through_target_without_module():
    cfg = {"_target_": "torch.nn.Softmax", "dim": -1, "input_shape": [7]}
    problem = build_problem(cfg, torch.float64, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    s = torch.softmax(problem.x, -1)
    assert torch.allclose(reference, torch.diag(s) - torch.outer(s, s))
