"""Every registered strategy against the reference, and the reference against algebra."""

from __future__ import annotations

import pytest
import torch

from conftest import jacobian, rel_err
from jacbench.numerics import compare
from jacbench.problem import build_problem, make_problem
from jacbench.reference import reference_jacobian
from jacbench.registry import load_registry
from jacbench.strategy import Kind, StrategySkip

CPU = torch.device("cpu")
MLP = {"_target_": "jacbench.models.mlp.MLP", "n_in": 6, "hidden": 9, "n_out": 4, "depth": 2}
CAT_POLY = {"_target_": "jacbench.models.toy.CatPoly"}
RECIPROCAL = {"_target_": "jacbench.models.toy.Reciprocal", "n": 5}
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


@pytest.mark.parametrize("name", ["jacfwd_compiled", "jacrev_compiled", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_and_auto_strategies_are_exact_in_both_dtypes(name, dtype):
    problem = build_problem(MLP, dtype, CPU, seed=0)
    reference, _ = reference_jacobian(problem)
    prep = REGISTRY.prepare(name, problem)
    metrics = compare(prep(problem.x), reference, dtype, REGISTRY.get(name).kind)
    assert metrics.within_tol and metrics.err_eps < 10
    assert not prep(problem.x).requires_grad


@pytest.mark.parametrize(("n_in", "n_out", "expected"), [(4, 40, "jacfwd"), (40, 4, "jacrev")])
def test_auto_rule_follows_the_shape_without_calibration(n_in, n_out, expected):
    from jacbench.strategies.auto import rule

    problem = build_problem({**MLP, "n_in": n_in, "n_out": n_out}, torch.float32, CPU, 0)
    assert rule(problem, compile=False) == expected
    assert rule(problem, compile=True) == f"{expected}_compiled"
    prep = REGISTRY.prepare("auto", problem, calibrate=False, compile=False)
    assert prep.info.chosen_strategy == expected


def test_auto_calibration_keeps_the_fastest_candidate(monkeypatch):
    import jacbench.strategies.auto as auto_module

    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    fake_times = {"jacfwd": 3.0, "jacrev": 1.0, "grads_batched": 2.0}
    monkeypatch.setattr(
        auto_module, "_median_seconds", lambda prep, x, s: fake_times[prep.strategy]
    )
    choice = auto_module.choose(problem, auto_module.AutoOptions(compile=False))
    assert choice.strategy == "jacrev"


def test_auto_keeps_pytorchs_default_where_it_is_fastest(monkeypatch):
    import jacbench.strategies.auto as auto_module

    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    fake_times = {"jacfwd": 3.0, "jacrev": 2.0, "grads_batched": 2.0, "autograd_loop": 1.5}
    fake_times["functional"] = 1.0
    monkeypatch.setattr(
        auto_module, "_median_seconds", lambda prep, x, s: fake_times[prep.strategy]
    )
    choice = auto_module.choose(problem, auto_module.AutoOptions(compile=False))
    assert choice.strategy == "functional"


@pytest.mark.parametrize(
    "leak",
    [
        torch._C._AutoDispatchBelowADInplaceOrView,  # CI: "InferenceMode::is_enabled() && ..."
        lambda: torch.autograd.grad_mode._enter_inference_mode(True),
    ],
    ids=["dispatch_guard", "inference_mode"],
)
def test_compiled_calls_put_back_autograd_state_the_compiler_left_behind(leak):
    """What torch.compile left entered in CI is undone after the call: later code still
    records graphs and runs forward AD."""
    from jacbench.strategies.compiled import autograd_state_kept

    with autograd_state_kept():
        guard = leak()
        guard.__enter__()  # entered and never exited, as the compiler left it
    x = torch.randn(3, requires_grad=True)
    (x * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))
    zeros, ones = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    jvp = torch.func.jvp(torch.sin, (zeros,), (ones,))
    assert torch.equal(jvp[1], ones)
    _HELD.append(guard)  # alive to the end of the process: the state was really left behind


_HELD: list[object] = []


def test_a_compile_whose_own_guards_fail_once_is_retried_then_a_second_failure_skips(
    monkeypatch,
):
    """torch 2.13 sometimes fails its own guard right after compiling (autograd keys left
    excluded mid-compile); the retry compiles again. Any other failure, or a second one, is
    a skip with the reason."""
    from jacbench.strategies import compiled

    failures = []

    def flaky_compile(fn, **options):
        def run(v):
            if len(failures) < budget:
                failures.append(v)
                raise AssertionError(f"{compiled.RETRIED}. This is a bug")
            return fn(v)

        return run

    monkeypatch.setattr(torch, "compile", flaky_compile)
    budget = 1
    call = compiled.compile_checked(torch.sin, torch.zeros(2))
    assert len(failures) == 1 and torch.equal(call(torch.zeros(2)), torch.zeros(2))
    failures.clear()
    budget = 2
    with pytest.raises(StrategySkip, match="torch.compile failed here: AssertionError: Guard"):
        compiled.compile_checked(torch.sin, torch.zeros(2))


def test_a_guard_left_in_a_reference_cycle_is_collected_while_the_state_is_put_back():
    """The compiler's guard may be only unreachable (a frame kept by a traceback): collected
    at a random later moment, its destructor would undo whatever state is current then."""
    import gc

    from jacbench.strategies.compiled import autograd_keys_excluded, autograd_state_kept

    gc.disable()  # as between two automatic collections
    try:
        with autograd_state_kept():
            cycle: dict = {"guard": torch._C._AutoDispatchBelowADInplaceOrView()}
            cycle["guard"].__enter__()
            cycle["self"] = cycle
            del cycle
            assert autograd_keys_excluded() == (True, True)
        assert autograd_keys_excluded() == (False, False)
        with torch.inference_mode():  # a later region whose state a stray destructor undid
            inside = autograd_keys_excluded()
            gc.collect()
            assert autograd_keys_excluded() == inside
    finally:
        gc.enable()
    assert autograd_keys_excluded() == (False, False)
