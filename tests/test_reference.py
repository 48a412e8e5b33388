"""The reference is independent of the strategy under test, knows its own uncertainty, and
works for user functions whose constants live in a closure (issue 13)."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
import torch

from helpers.cli import compose_job
from jacbench.benchmark.judging import compare
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import ANALYTIC, FORWARD, REVERSE, References, _row_loop
from jacbench.core.enums import Kind, Mode
from jacbench.core.errors import ConfigError
from jacbench.core.memory_budget import available_cpu_memory, check_fits
from jacbench.core.registry import load_registry
from jacbench.run.runner import execute

REGISTRY = load_registry()
CPU = torch.device("cpu")
CLOSURE = ["model=custom", "model._target_=user_models.closure_mlp", "model.input_shape=[5]"]


def run(*overrides: str):
    """One job through the composed config and the job function, in process."""
    return execute(compose_job(*overrides, "timing=quick", "timing.memory=false"), REGISTRY)


def test_a_function_with_closure_constants_gets_a_float64_reference():
    result = run(*CLOSURE, "strategy=jacrev", "dtype=float32")
    assert result.ok, result.error_message
    assert result.within_tol and result.reference_method == FORWARD
    assert (result.n_in, result.n_out) == (5, 3)


def test_closure_constants_that_cannot_follow_the_dtype_get_one_line_saying_what_to_do():
    result = run(*CLOSURE, "strategy=jacrev", "dtype=float64")  # float32 weights @ float64 x
    assert result.status == "failed"
    assert result.error_message.startswith("model 'closure_mlp' cannot compute in float64")
    assert "register them as buffers" in result.error_message


def test_the_closure_reference_is_the_float64_jacobian_of_the_same_function():
    problem = build_problem(
        {"_target_": "user_models.closure_mlp", "input_shape": [5]}, torch.float32, CPU, 0
    )
    f = problem.f
    weight_times = torch.func.jacrev(lambda x: f(x.float()).double())  # float32 arithmetic
    reference = References(problem).for_mode(Mode.REVERSE)
    rel = torch.linalg.norm(reference.jacobian - weight_times(problem.x.double()))
    assert 0 < rel / torch.linalg.norm(reference.jacobian) < 1e-5  # float32 rounding only


def test_custom_module_with_its_own_input_shape_needs_no_model_input_shape():
    result = run("model=custom", "model._target_=user_models.Shaped", "dtype=float64")
    assert result.ok, result.error_message
    assert result.n_in == 6 and result.within_tol


@pytest.mark.parametrize(
    ("strategy", "model", "method"),
    [
        ("jacrev", "mlp", FORWARD),
        ("functional", "mlp", FORWARD),
        ("grads_batched", "mlp", FORWARD),
        ("jacfwd", "mlp", REVERSE),
        ("fd_central", "mlp", REVERSE),
        ("jacrev", "seed002_reciprocal", ANALYTIC),
        ("analytic", "seed002_reciprocal", REVERSE),
    ],
)
def test_the_reference_never_shares_the_strategys_mode(strategy, model, method):
    result = run(f"strategy={strategy}", f"model={model}", "dtype=float64")
    assert result.ok and result.within_tol, result.error_message
    assert result.reference_method == method
    assert 0 <= result.reference_uncertainty < 1e-14
    if model == "mlp" and strategy != "fd_central":
        # float64 reverse mode against forward mode: rounding shows, not a fake 0
        assert result.rel_err > 0


def test_auto_is_judged_by_a_method_other_than_the_one_it_chose():
    result = run("strategy=auto", "strategy.compile=false", "dtype=float64")
    assert result.ok, result.error_message
    chosen = REGISTRY.strategies[result.chosen_strategy].mode
    assert result.reference_method == (REVERSE if chosen is Mode.FORWARD else FORWARD)


def test_an_undecided_reference_leaves_the_verdict_open_whatever_the_error():
    reference = torch.ones(3, 3, dtype=torch.float64)
    answer = reference * (1 + 1e-12)  # 1e-12 relative: beyond float64's 100-eps tolerance
    assert compare(answer, reference, torch.float64, Kind.EXACT).within_tol is False
    assert compare(reference, reference, torch.float64, Kind.EXACT).within_tol is True
    why = "the reference methods disagree"
    assert compare(answer, reference, torch.float64, Kind.EXACT, why).within_tol is None
    assert compare(reference, reference, torch.float64, Kind.EXACT, why).within_tol is None


def test_uncertainty_is_the_disagreement_of_two_exact_methods():
    problem = build_problem({"_target_": "jacbench.models.mlp.MLP"}, torch.float32, CPU, 0)
    refs = References(problem)
    reference = refs.for_mode(Mode.REVERSE)
    other = refs.jacobians[REVERSE]
    expected = torch.linalg.norm(other - reference.jacobian) / torch.linalg.norm(reference.jacobian)
    assert reference.uncertainty == pytest.approx(float(expected))
    assert set(refs.jacobians) == {FORWARD, REVERSE}


def test_an_unaffordable_independent_mode_is_not_computed_and_the_record_says_so():
    problem = build_problem({"_target_": "user_models.WideSum"}, torch.float32, CPU, 0)
    refs = References(problem)
    reference = refs.for_mode(Mode.REVERSE)
    assert FORWARD not in refs.jacobians  # 20000 forward passes were never run
    assert reference.method == REVERSE and reference.uncertainty is None


def test_a_job_too_large_for_memory_fails_in_one_line_before_the_reference_runs():
    """200000 x 20000 (16 GB in float32, 4 float64 copies more): refused from the shape."""
    if (available_cpu_memory() or 0) > 150 * 2**30:
        pytest.skip("this machine has room for a 200000 x 20000 Jacobian")
    result = run("model=custom", "model._target_=user_models.Repeat", "strategy=jacrev")
    assert result.status == "failed" and (result.n_out, result.n_in) == (200000, 20000)
    message = result.error_message
    # judged on a sample (no dense reference), but the dense answer and its working copy:
    assert message.startswith("not run: the 200000 x 20000 Jacobian needs about 29.8 GiB")
    assert "GiB are available" in message and "smaller model or input_shape" in message
    assert not result.reference_method and result.time_median_s is None  # nothing ran


def test_ulimit_v_counts_as_the_memory_available():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    unlimited = available_cpu_memory()
    status = Path("/proc/self/status").read_text()
    size = next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmSize" in line)
    resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, hard))
    try:
        limited = available_cpu_memory()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert limited is not None and limited <= 2**30 < (unlimited or 2**31)
    with pytest.raises(ConfigError, match="but 1 GiB are available"):
        check_fits(16000, 2000, 1, torch.float32, CPU, room=2**30)  # dense reference: 1.2 GB


def test_the_row_by_row_reference_is_the_jacobian():
    """The fallback where vmap has no rule fills one preallocated matrix, row by row."""
    weight = torch.randn(7, 5, dtype=torch.float64)

    def f(x):
        return torch.tanh(weight @ x)

    x = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(_row_loop(f, x, 7), torch.func.jacrev(f)(x))


def custom(target: str) -> list[str]:
    return ["model=custom", f"model._target_=user_models.{target}"]


@pytest.mark.parametrize("strategy", ["analytic", "jacrev", "jacfwd"])
def test_a_formula_that_disagrees_with_ad_decides_no_verdict(strategy):
    # issue 32: strategy=analytic was recorded within tolerance (rel_err 0.5) and the correct
    # jacrev outside it, against the wrong formula with a tolerance widened to 0.5
    result = run(*custom("WrongFormula"), f"strategy={strategy}", "dtype=float64")
    assert result.ok, result.error_message
    assert result.within_tol is None and result.tolerance == pytest.approx(100 * 2.0**-52)
    assert result.undecided_reason.startswith("the reference methods disagree")
    assert "analytic and " in result.undecided_reason or " and analytic" in result.undecided_reason


@pytest.mark.parametrize("strategy", ["jacrev", "fd_central"])
def test_a_graph_cut_shared_by_every_ad_method_is_caught_by_the_probe(strategy):
    # x * x.sum().item(): jacrev and the AD reference agreed (rel_err 0, within tolerance)
    # while 50% off the true derivative; the correct fd_central was scored outside
    result = run(*custom("ItemCut"), f"strategy={strategy}", "dtype=float64")
    assert result.ok, result.error_message
    assert result.within_tol is None
    assert "finite-difference probe" in result.undecided_reason


def test_a_forward_that_is_not_deterministic_decides_no_verdict():
    result = run(*custom("CallCounter"), "strategy=jacrev", "dtype=float64")
    assert result.ok, result.error_message
    assert result.within_tol is None and "not deterministic" in result.undecided_reason


def test_smooth_and_kinked_functions_pass_the_probe():
    for target in ("jacbench.models.mlp.MLP", "jacbench.models.toy.CatPoly"):
        problem = build_problem({"_target_": target}, torch.float64, CPU, 0)
        assert References(problem).for_mode(Mode.REVERSE).doubt == ""
    relu = build_problem(
        {"_target_": "jacbench.models.mlp.MLP", "activation": "relu"}, torch.float32, CPU, 0
    )
    assert References(relu).for_mode(Mode.FORWARD).doubt == ""


def _map_problem(n_out: int = 16):
    from jacbench.run.identity import identify
    from jacbench.run.job import make_job

    cfg = compose_job("model=map_dense", "model.n_in=16", f"model.n_out={n_out}", "dtype=float64")
    job = make_job(cfg, load_registry(), identify(cfg))
    return job, build_problem(job.model, job.dtype, job.device, job.seed)


def test_the_next_job_of_the_same_problem_reuses_its_references_after_checking_its_values():
    """A sweep over strategies computed the float64 references of one problem once per
    strategy (0.2 s a job at N = 1024 on the map); the next job of the same problem reuses
    them, but only where the rebuilt problem's values are equal."""
    from jacbench.benchmark.reference import LastProblem
    from jacbench.run.stages import problem_key

    last = LastProblem()
    job, problem = _map_problem()
    first = last.references(problem_key(job), problem)
    first.for_mode(Mode.REVERSE)
    again_job, again = _map_problem()  # built again from the same config
    assert again is not problem
    assert last.references(problem_key(again_job), again) is first
    other_job, other = _map_problem(n_out=8)
    assert last.references(problem_key(other_job), other) is not first  # another key
    _, changed = _map_problem()
    with torch.no_grad():
        next(changed.module.parameters())[0, 0] += 1e-9  # the same key, other values
    fresh = last.references(problem_key(job), changed)
    assert fresh is not first
    expected = References(changed).for_mode(Mode.REVERSE).jacobian
    assert torch.equal(fresh.for_mode(Mode.REVERSE).jacobian, expected)
