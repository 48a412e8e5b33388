"""Sparse strategies: the pattern (declared or detected), its colouring, and the Jacobian
rebuilt from a few compressed passes, against dense references."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

import jacbench
from helpers.cli import QUICK, compose_job
from helpers.contract import jacobian_at, rel_err
from jacbench.benchmark.judging import compare
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import reference_jacobian
from jacbench.core import sparsity
from jacbench.core.errors import ConfigError
from jacbench.core.problem import make_problem
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind
from jacbench.models.pde import Burgers1D
from jacbench.run.runner import execute

CPU = torch.device("cpu")
REGISTRY = load_registry()
SPARSE = ["sparse_jacfwd", "sparse_jacrev", "sparse_fd"]
TOLERANCE = {Kind.EXACT: 1e-12, Kind.APPROXIMATE: 1e-6}
PER_SAMPLE = {"_target_": "jacbench.models.mlp.PerSampleMLP", "samples": 4, "n_in": 3}
BURGERS = {"_target_": "jacbench.models.pde.Burgers1D", "n": 30}


@pytest.mark.parametrize("pattern", ["auto", "detect"])
@pytest.mark.parametrize("name", SPARSE)
def test_tridiagonal_burgers_takes_three_colours_and_is_right_at_two_points(name, pattern):
    problem = build_problem(BURGERS, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare(name, problem, pattern=pattern)
    assert prep.info.n_colors == 3
    assert prep.info.pattern_density == pytest.approx((3 * 30 - 2) / 30**2)
    for x in (problem.x, problem.x + 0.3 * torch.randn_like(problem.x)):
        expected = jacobian_at(problem, x)
        assert rel_err(prep(x), expected) < TOLERANCE[REGISTRY.get(name).kind]


@pytest.mark.parametrize("name", SPARSE)
def test_block_diagonal_pattern_is_detected_and_coloured_per_block(name):
    problem = build_problem(PER_SAMPLE, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare(name, problem)
    blocks = torch.block_diag(*[torch.ones(2, 3)] * 4)
    assert prep.info.pattern_density == pytest.approx(float(blocks.mean()))
    assert prep.info.n_colors == (2 if name == "sparse_jacrev" else 3)  # one block's width
    reference, _ = reference_jacobian(problem)
    assert rel_err(prep(problem.x), reference) < TOLERANCE[REGISTRY.get(name).kind]


@pytest.mark.parametrize("name", SPARSE)
def test_batches_of_points_get_per_sample_jacobians(name):
    problem = build_problem({**BURGERS, "batch": 3}, torch.float64, CPU, seed=0)
    jac = REGISTRY.prepare(name, problem)(problem.x)
    assert jac.shape == (3, 30, 30)
    assert rel_err(jac, jacobian_at(problem, problem.x)) < TOLERANCE[REGISTRY.get(name).kind]


def test_detection_keeps_a_dependency_whose_derivative_is_zero_at_the_point():
    # d(x0 * x1)/dx0 = x1 = 0 here: a pattern from values would drop it, NaN tangents do not
    f = lambda v: torch.stack([v[0] * v[1], v[2].sin()])  # noqa: E731
    x = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)
    pattern = sparsity.detect(f, [x], n_out=2)
    assert pattern.to_dense().tolist() == [[True, True, False], [False, False, True]]


class WronglyDeclared(torch.nn.Module):
    """Burgers declaring a diagonal pattern: the off-diagonal entries are missed."""

    def __init__(self) -> None:
        super().__init__()
        self.burgers = Burgers1D(n=12)
        self.input_shape = (12,)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.burgers(u)

    def jacobian_sparsity(self) -> torch.Tensor:
        return torch.eye(12)


@pytest.mark.parametrize("name", SPARSE)
def test_a_wrong_declared_pattern_is_refused_at_preparation_not_a_wrong_answer(name):
    problem = make_problem(
        "wrong", WronglyDeclared().double(), torch.rand(12).double(), "input", False
    )
    reference, _ = reference_jacobian(problem)
    kind = REGISTRY.get(name).kind
    with pytest.raises(ConfigError, match=r"pattern \(declared\) misses entries"):
        REGISTRY.prepare(name, problem)
    detected = REGISTRY.prepare(name, problem, pattern="detect")(problem.x)
    assert compare(detected, reference, torch.float64, kind).within_tol


def test_column_colouring_of_a_dense_pattern_is_one_colour_per_column():
    pattern = sparsity.from_tensor(torch.ones(3, 4), (3, 4))
    assert sparsity.color_columns(pattern).tolist() == [0, 1, 2, 3]
    assert sparsity.color_rows(pattern).tolist() == [0, 1, 2]


def test_colours_never_share_a_row():
    mask = torch.rand(40, 30, generator=torch.Generator().manual_seed(0)) < 0.1
    pattern = sparsity.from_tensor(mask, (40, 30))
    colors = sparsity.color_columns(pattern)
    for c in colors.unique():
        assert (mask[:, colors == c].sum(1) <= 1).all()


def test_library_returns_a_csr_matrix_on_request():
    burgers = Burgers1D(n=20).double()
    x = torch.rand(20, dtype=torch.float64)
    prep = jacbench.prepare(burgers, x, "sparse_jacfwd", output="csr")
    jac = prep(x)
    assert jac.layout == torch.sparse_csr and jac.values().numel() == 3 * 20 - 2
    assert torch.allclose(jac.to_dense(), burgers.analytic_jacobian(x), rtol=1e-13)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"pattern": "guess"}, "pattern must be one of auto, detect"),
        ({"output": "coo"}, "output must be one of dense, csr"),
        ({"detect_points": 0}, "detect_points must be a positive integer"),
        ({"detect_points": 10**6}, "detect_points must be a positive integer up to 100"),
    ],
)
def test_bad_options_get_one_clear_line(options, match):
    with pytest.raises(ValueError, match=match):
        REGISTRY.get("sparse_jacfwd").make_options(options)


@pytest.mark.slow
def test_colours_and_density_reach_parquet_and_mlflow(cli):
    proc = cli("strategy=sparse_jacfwd", "model=burgers", *QUICK)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert row["n_colors"] == 3 and 0 < row["pattern_density"] < 0.05
    assert bool(row["within_tol"]) and "3 colours" in proc.stdout
    client = MlflowClient(tracking_uri=cli.tracking_uri)
    params = client.get_run(row["mlflow_run_id"]).data.params
    assert params["n_colors"] == "3" and float(params["pattern_density"]) < 0.05


def test_auto_takes_the_sparse_rule_where_a_pattern_is_declared_and_dense_elsewhere():
    burgers = build_problem(BURGERS, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare("auto", burgers, calibrate=False, compile=False)
    assert prep.info.chosen_strategy == "sparse_jacfwd" and prep.info.n_colors == 3
    assert rel_err(prep(burgers.x), jacobian_at(burgers, burgers.x)) < 1e-12
    mlp = build_problem(PER_SAMPLE, torch.float64, CPU, seed=0)  # no declared pattern
    assert REGISTRY.prepare("auto", mlp, calibrate=False, compile=False).info.chosen_strategy in (
        "jacfwd",
        "jacrev",
    )


def test_laplacian_pattern_is_the_five_point_stencil_and_its_jacobian_right():
    problem = build_problem(
        {"_target_": "jacbench.models.pde.Laplacian2D", "n": 5}, torch.float64, CPU, seed=0
    )
    prep = REGISTRY.prepare("sparse_jacrev", problem, pattern="detect")
    assert prep.info.pattern_density == pytest.approx((5 * 25 - 4 * 5) / 25**2)
    declared = sparsity.from_tensor(problem.sparsity(), (25, 25))
    assert declared.nnz == 5 * 25 - 4 * 5
    reference, kind = reference_jacobian(problem)
    assert kind == "analytic" and rel_err(prep(problem.x), reference) < 1e-12


def test_a_csr_result_is_timed_as_it_is_and_judged_against_the_dense_reference():
    overrides = ["strategy=sparse_jacfwd", "strategy.output=csr", "model=burgers", "timing=quick"]
    result = execute(compose_job(*overrides, "timing.memory=false"), REGISTRY)
    assert result.status == "ok", result.error_message
    assert result.within_tol and result.n_colors == 3 and result.time_median_s > 0
    assert len(result.jacobian) == 64 * 64  # stored dense, as every strategy's


@pytest.mark.compiles
@pytest.mark.slow
@pytest.mark.parametrize("name", ["sparse_jacfwd", "sparse_jacrev"])
@pytest.mark.parametrize("output", ["dense", "csr"])
def test_compiled_sparse_jacobians_are_exact_at_two_points(name, output):
    """The compiled passes are a traced graph compiled by inductor, the nonzeros read back
    outside it by a linear index (issue 30)."""
    problem = build_problem(BURGERS, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare(name, problem, compile=True, output=output)
    for x in (problem.x, problem.x + 0.3 * torch.randn_like(problem.x)):
        jac = prep(x)
        jac = jac.to_dense() if output == "csr" else jac
        assert rel_err(jac, jacobian_at(problem, x)) < 1e-12


@pytest.mark.compiles
@pytest.mark.slow
def test_a_compiled_sparse_jacobian_of_a_branching_function_falls_back_to_dynamo():
    """One traced graph cannot hold ``if x.sum() > 0``; dynamo follows it by recompiling."""

    def f(v):
        return v**2 if v.sum() > 0 else v**3

    x = torch.linspace(0.1, 1.0, 6, dtype=torch.float64)
    pattern = torch.eye(6, dtype=torch.bool)
    prep = jacbench.prepare(f, x, "sparse_jacfwd", compile=True, pattern=pattern)
    for point in (x, -x):
        assert torch.allclose(prep(point), torch.func.jacfwd(f)(point))
