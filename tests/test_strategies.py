"""Every registered strategy against the reference, and the reference against algebra."""

from __future__ import annotations

import pytest
import torch

from helpers.contract import CONTRACT_MLP, CONTRACT_RECIPROCAL, jacobian, rel_err
from jacbench.benchmark.judging import compare
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import reference_jacobian
from jacbench.core.problem import make_problem
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind, Mode, StrategySkip

CPU = torch.device("cpu")
MLP = CONTRACT_MLP
CAT_POLY = {"_target_": "jacbench.models.toy.CatPoly"}
RECIPROCAL = CONTRACT_RECIPROCAL
REGISTRY = load_registry()
EXACT = sorted(n for n, s in REGISTRY.strategies.items() if s.kind is Kind.EXACT)
APPROXIMATE = sorted(n for n, s in REGISTRY.strategies.items() if s.kind is Kind.APPROXIMATE)


def test_reference_matches_the_chain_rule_by_hand():
    cfg = {**MLP, "depth": 1, "activation": "tanh"}
    problem = build_problem(cfg, torch.float64, CPU, seed=3)
    reference, kind = reference_jacobian(problem)
    lin1, _, lin2 = problem.module
    pre = lin1.weight @ problem.x + lin1.bias
    by_hand = lin2.weight @ torch.diag(1 - torch.tanh(pre) ** 2) @ lin1.weight
    assert kind == "reverse_float64"
    assert torch.allclose(reference, by_hand, rtol=1e-13, atol=1e-15)


def test_reference_of_a_float32_problem_is_taken_at_the_rounded_point():
    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    exact = problem.cast(torch.float64)
    assert reference.dtype == torch.float64
    assert torch.equal(exact.x, problem.x.double())


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("model", [MLP, CAT_POLY, RECIPROCAL], ids=["mlp", "cat_poly", "recip"])
def test_exact_strategies_match_reference_in_float64(name, model):
    problem = build_problem(model, torch.float64, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    try:
        jac = jacobian(name, problem)
    except StrategySkip:
        assert name == "analytic" and problem.analytic is None
        return
    assert jac.shape == (problem.n_out, problem.n_in)
    assert not jac.requires_grad
    assert rel_err(jac, reference) < 1e-13


@pytest.mark.parametrize("name", EXACT)
def test_exact_strategies_on_parameter_jacobians(name):
    problem = build_problem({**MLP, "wrt": "params"}, torch.float64, CPU, seed=0)
    assert problem.n_in == sum(p.numel() for p in problem.module.parameters())
    reference, _ = reference_jacobian(problem)
    fd = jacobian("fd_central", problem)
    assert rel_err(fd, reference) < 1e-8  # the reference is an independent check of fd too
    if name == "analytic":
        with pytest.raises(StrategySkip):
            jacobian(name, problem)
        return
    assert rel_err(jacobian(name, problem), reference) < 1e-13


@pytest.mark.parametrize("name", APPROXIMATE)
def test_approximate_strategies_are_close_in_float64(name):
    problem = build_problem(MLP, torch.float64, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    assert rel_err(jacobian(name, problem), reference) < 1e-6


class Branchy(torch.nn.Module):
    """Data-dependent control flow: vmap cannot batch it, so evaluation must loop."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return torch.tanh(y) if float(y.detach().sum()) > -1e9 else y


def test_finite_differences_batch_where_possible_and_loop_elsewhere():
    looped = make_problem(
        "branchy", Branchy().double(), torch.randn(4, dtype=torch.float64), "params", False
    )
    assert not looped.batched_natively  # vmap refused: the loop path
    vmapped = build_problem({**MLP, "wrt": "params"}, torch.float64, CPU, seed=0)
    assert vmapped.batched_natively  # parameters batched through vmap(functional_call)
    native = build_problem(MLP, torch.float64, CPU, seed=0)
    assert native.batched_natively
    for p in (looped, vmapped, native):
        reference, _ = reference_jacobian(p)
        assert rel_err(jacobian("fd_forward", p), reference) < 1e-6
        assert rel_err(jacobian("fd_forward_loop", p), reference) < 1e-6


def test_naive_single_grad_returns_the_summed_rows_of_seed_003():
    problem = build_problem(CAT_POLY, torch.float64, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    naive = jacobian("naive_single_grad", problem)
    assert torch.allclose(naive, reference.sum(0).expand_as(reference))
    verdict = compare(naive, reference, torch.float64, REGISTRY.get("naive_single_grad").kind)
    assert not verdict.within_tol


def test_fd_step_option_changes_the_answer():
    problem = build_problem(MLP, torch.float64, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    good = rel_err(jacobian("fd_forward", problem), reference)
    coarse = rel_err(jacobian("fd_forward", problem, eps=1e-2), reference)
    assert coarse > 100 * good


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("fd_central", {"eps": 0.0}),
        ("fd_forward", {"eps": -1e-3}),
        ("jacrev", {"chunk_size": 0}),
        ("jacfwd", {"randomness": "sometimes"}),
    ],
)
def test_invalid_options_are_refused(name, options):
    with pytest.raises(ValueError):
        REGISTRY.get(name).make_options(options)


def test_unknown_option_is_refused_with_valid_names():
    with pytest.raises(ValueError, match="chunk_size"):
        REGISTRY.get("jacrev").make_options({"chunksize": 4})


def test_float32_verdicts_use_the_dtype_tolerance():
    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    jac = jacobian("jacrev", problem)
    metrics = compare(jac, reference, torch.float32, Kind.EXACT)
    assert metrics.within_tol and 0 < metrics.err_eps < 100
    broken = jac.clone()
    broken[0, 0] = float("nan")
    bad = compare(broken, reference, torch.float32, Kind.EXACT)
    assert bad.n_nonfinite == 1 and not bad.within_tol


@pytest.mark.compiles  # auto with its defaults: calibration and its compiled candidate
@pytest.mark.parametrize("name", ["jacfwd_compiled", "jacrev_compiled", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_and_auto_strategies_are_exact_in_both_dtypes(name, dtype):
    problem = build_problem(MLP, dtype, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    prep = REGISTRY.prepare(name, problem)
    metrics = compare(prep(problem.x), reference, dtype, REGISTRY.get(name).kind)
    assert metrics.within_tol and metrics.err_eps < 10
    assert not prep(problem.x).requires_grad


@pytest.mark.parametrize(
    ("n_in", "n_out", "eager", "compiled", "first"),
    [
        (
            4,
            40,
            ("jacfwd_folded", {"compile": False}),
            ("jacfwd_folded", {"compile": True}),
            "double_backward",  # columns, as forward mode: by reverse mode twice
        ),
        (40, 4, ("jacrev", {}), ("jacrev_compiled", {}), "autograd_loop"),  # rows
    ],
)
def test_auto_rule_follows_the_shape_without_calibration(n_in, n_out, eager, compiled, first):
    from jacbench.strategies.auto import rule

    problem = build_problem({**MLP, "n_in": n_in, "n_out": n_out}, torch.float32, CPU, 0)
    assert rule(problem, compile=False) == eager
    assert rule(problem, compile=True) == compiled
    prep = REGISTRY.prepare("auto", problem, calibrate=False, compile=False)
    assert prep.info.chosen_strategy == eager[0]
    tiered = REGISTRY.prepare("auto", problem, cache=False)  # the default: eager first
    # plain reverse-mode autograd: nothing to build, nothing of torch's compiler imported
    assert (tiered.info.chosen_strategy, tiered.info.tier) == (first, "eager")


def test_auto_calibration_keeps_the_fastest_candidate(monkeypatch):
    import jacbench.strategies.auto as auto_module

    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    fake_times = {"jacfwd": 3.0, "jacrev": 1.0, "grads_batched": 2.0}
    monkeypatch.setattr(
        auto_module,
        "_seconds_per_call",
        lambda preps, x, budget: [fake_times.get(p.strategy, 9.0) for p in preps],
    )
    choice, _ = auto_module.choose(problem, auto_module.AutoOptions(compile=False))
    assert choice.strategy == "jacrev"


def test_auto_keeps_pytorchs_default_where_it_is_fastest(monkeypatch):
    import jacbench.strategies.auto as auto_module

    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    fake_times = {"jacfwd": 3.0, "jacrev": 2.0, "grads_batched": 2.0, "autograd_loop": 1.5}
    fake_times["functional"] = 1.0
    monkeypatch.setattr(auto_module, "LOOP_CUTOFF", float("inf"))  # time the loops whatever
    monkeypatch.setattr(
        auto_module,
        "_seconds_per_call",
        lambda preps, x, budget: [fake_times.get(p.strategy, 9.0) for p in preps],
    )
    choice, _ = auto_module.choose(problem, auto_module.AutoOptions(compile=False))
    assert choice.strategy == "functional"


def test_a_prepared_jacobian_says_its_mode_and_auto_its_choices():
    """Issue 28: the runner asked the registry again for the mode of what auto chose; the
    prepared Jacobian now carries it."""
    registry = load_registry()
    problem = build_problem(MLP, torch.float64, CPU, seed=0)
    assert registry.prepare("jacfwd", problem).mode is Mode.FORWARD
    assert registry.prepare("jacrev", problem).mode is Mode.REVERSE
    prep = registry.prepare("auto", problem, compile=False, cache=False)
    assert prep.mode is registry.get(prep.info.chosen_strategy).mode is not Mode.AUTO
