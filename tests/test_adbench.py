"""ADBench's bundle adjustment (issue 31): the model, its declared pattern, colours at their
bound, and a reference that scales (sampled where a dense float64 reference cannot fit)."""

from __future__ import annotations

import pytest
import torch

from helpers.cli import compose_job
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import (
    SAMPLED_METHOD,
    References,
    sampled_entries,
    sampled_reference,
)
from jacbench.core import memory_budget, sparsity
from jacbench.core.registry import load_registry
from jacbench.models.adbench import BundleAdjustment
from jacbench.run.runner import execute

CPU = torch.device("cpu")
SMALL = {"_target_": "jacbench.models.adbench.BundleAdjustment", "n": 5, "m": 7, "p": 40}


def test_the_shipped_file_gives_adbench_shapes():
    model = BundleAdjustment()  # ba1: N=49, M=7776, P=31843
    assert model.input_shape == (11 * 49 + 3 * 7776 + 31843,)
    x = model.sample_input(torch.Generator())
    assert model(x).shape == (3 * 31843,)


def test_the_declared_pattern_covers_the_jacobian_and_tracing_proves_it_tighter():
    problem = build_problem(SMALL, torch.float64, CPU, 0)
    x = problem.x + 0.01 * torch.randn(problem.x.shape, dtype=torch.float64)
    jac = torch.func.jacfwd(problem.f)(x)
    declared = sparsity.from_tensor(problem.sparsity(), tuple(jac.shape)).to_dense()
    assert not ((jac != 0) & ~declared).any()
    assert (declared.sum(dim=1) <= 15).all()  # at most 15 unknowns a row
    traced, source = sparsity.find(problem.f, problem.points, problem.n_out)
    assert source == "traced" and not ((jac != 0) & ~traced.to_dense()).any()
    assert traced.nnz <= int(declared.sum())


def test_bundle_adjustment_colours_are_at_their_bound():
    pattern = sparsity.from_tensor(BundleAdjustment().jacobian_sparsity(), (3 * 31843, 55710))
    assert sparsity.lower_bound(pattern) == 15
    assert int(sparsity.color_columns(pattern).max()) + 1 == 15


def test_the_sampled_reference_agrees_with_the_dense_one_where_both_fit():
    problem = build_problem(SMALL, torch.float64, CPU, 0)
    dense = References(problem).for_mode(None).jacobian
    sample = sampled_reference(problem, k=8)
    assert torch.allclose(sample.by_cols, dense[:, sample.cols], rtol=1e-12, atol=1e-12)
    assert torch.allclose(sample.by_rows, dense[sample.rows, :], rtol=1e-12, atol=1e-12)
    assert sample.uncertainty is not None and sample.uncertainty < 1e-14
    assert sample.unstable == "" and sample.doubt == ""
    shape = (problem.n_out, problem.n_in)
    expected = sample.expected()
    assert torch.allclose(sampled_entries(dense, sample, shape), expected, rtol=1e-12)
    csr = sampled_entries(dense.to_sparse_csr(), sample, shape)
    assert torch.equal(csr, sampled_entries(dense, sample, shape))


@pytest.mark.parametrize("strategy", ["sparse_jacfwd", "auto"])
def test_a_job_too_large_for_a_dense_reference_is_judged_on_a_sample(monkeypatch, strategy):
    monkeypatch.setattr(memory_budget, "DENSE_REFERENCE_MAX", 1000)  # the small BA: 120 x 116
    overrides = [f"{k}={v}" for k, v in SMALL.items() if k != "_target_"]
    # auto: eager here (its compiled candidate: test below; compiling belongs in own processes)
    options = ["strategy.output=csr"] if strategy != "auto" else ["strategy.compile=false"]
    cfg = compose_job(
        "model=ba",
        *[f"model.{o}" for o in overrides],
        f"strategy={strategy}",
        *options,
        "dtype=float64",
        "timing=quick",
        "timing.memory=false",
    )
    result = execute(cfg, load_registry())
    assert result.ok, result.error_message
    assert result.reference_method == SAMPLED_METHOD and result.within_tol
    assert result.reference_sample == 32 * 120 + 32 * 116
    # the declared pattern (15 a row) tightened by tracing: a pixel coordinate does not
    # depend on the other coordinate of the principal point
    assert result.n_colors == result.colors_lower_bound == 14
    if strategy == "auto":
        assert result.chosen_strategy == "sparse_jacfwd"  # the rows would need 48 colours


def test_auto_weighs_the_compiled_blocks_where_the_jacobian_is_too_large(monkeypatch):
    """BA declares its observations as local blocks: the compiled candidate takes 3 reverse
    passes per observation where the colours take 14 forward passes over all residuals
    (ba1: 27.7 against 83.4 ms, scripts/bench_adbench.py); the eager one imports nothing
    of the compiler."""
    from jacbench.strategies.auto import candidates

    monkeypatch.setattr(memory_budget, "DENSE_REFERENCE_MAX", 1000)
    problem = build_problem(SMALL, torch.float64, CPU, 0)
    assert candidates(problem, compile=True) == [
        ("sparse_jacfwd", {"output": "csr"}),
        ("blocks_jacrev", {"output": "csr", "compile": True}),
    ]
    assert candidates(problem, compile=False) == [("sparse_jacfwd", {"output": "csr"})]


def ba_objective_of(model: BundleAdjustment):
    """The user's own BA objective: a plain function, no declared pattern."""

    def ba_objective(x: torch.Tensor) -> torch.Tensor:
        return model(x)

    return ba_objective


@pytest.mark.parametrize("options", [{}, {"compile": False}], ids=["tiered", "calibrated"])
def test_auto_traces_the_pattern_of_a_plain_function_too_large_to_hold_dense(monkeypatch, options):
    """Issue 46: auto refused ("declares no sparsity pattern") where sparse_jacfwd traces
    one. Here the small BA counts as too large to hold dense."""
    import jacbench

    monkeypatch.setattr(memory_budget, "DENSE_REFERENCE_MAX", 5000)  # 120 x 116, 1160 nonzeros
    model = BundleAdjustment(n=5, m=7, p=40)
    x0 = model.sample_input(torch.Generator())
    f = ba_objective_of(model)
    prep = jacbench.prepare(f, x0, **options)
    assert prep.info.chosen_strategy == "sparse_jacfwd"  # the rows would need 48 colours
    assert prep.info.pattern_source == "traced"
    assert prep.info.n_colors == prep.info.colors_lower_bound == 14  # the declared one: 15
    gen = torch.Generator().manual_seed(0)
    for x in (x0 + 0.01 * torch.randn(x0.shape, generator=gen, dtype=x0.dtype) for _ in range(3)):
        jac = prep(x)
        assert jac.layout == torch.sparse_csr
        torch.testing.assert_close(jac.to_dense(), torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)


def test_auto_refuses_in_one_line_where_no_pattern_can_be_traced(monkeypatch):
    import jacbench
    from jacbench.core.strategy import StrategySkip

    monkeypatch.setattr(memory_budget, "DENSE_REFERENCE_MAX", 1000)
    model = BundleAdjustment(n=5, m=7, p=40)

    def branching(x: torch.Tensor) -> torch.Tensor:  # Python control flow on values
        return model(x) if float(x[0]) > 0 else -model(x)

    with pytest.raises(StrategySkip, match="cannot be traced.*declare one: prepare"):
        jacbench.prepare(branching, model.sample_input(torch.Generator()))


@pytest.mark.slow  # ~8 CPU-s, 8-20 s on a loaded two-core machine; the quick loop has the small BA
def test_prepare_of_a_plain_ba1_objective_picks_a_sparse_strategy_exact_on_sampled_columns():
    """ba1 (95529 x 55710, 5.3e9 dense entries) through the default prepare: ~8 CPU-s here
    (tracing ~2, the first eager call and its check ~3), a call ~0.3-0.9 s eager."""
    import jacbench

    model = BundleAdjustment()
    x0 = model.sample_input(torch.Generator())
    f = ba_objective_of(model)
    # the default auto, kept eager: a call over its compiled tier's estimate (2 s, on a
    # loaded machine) would compile ba1 next, which belongs in a process of its own
    prep = jacbench.prepare(f, x0, patience=100.0)
    assert prep.info.chosen_strategy in ("sparse_jacfwd", "sparse_jacrev")
    assert prep.info.pattern_source == "traced"
    gen = torch.Generator().manual_seed(0)
    x = x0 + 0.01 * torch.randn(x0.shape, generator=gen, dtype=x0.dtype)
    jac = prep(x)
    assert jac.layout == torch.sparse_csr and jac.shape == (3 * 31843, 55710)
    for col in torch.randint(0, x0.numel(), (6,), generator=gen).tolist():
        unit = torch.zeros_like(x)
        unit[col] = 1.0
        expected = torch.func.jvp(f, (x,), (unit,))[1]
        torch.testing.assert_close((jac @ unit.unsqueeze(1)).squeeze(1), expected)


def test_the_rotation_matrix_rotates_as_rodrigues_rotate_does_at_any_angle():
    """Hand tracking's global rotation as one matrix (computed once, not per vertex): the
    same rotation as ``rodrigues_rotate``, the zero angle included."""
    from jacbench.models.adbench import rodrigues_rotate, rotation_matrix

    gen = torch.Generator().manual_seed(0)
    points = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    for rot in (torch.randn(3, generator=gen, dtype=torch.float64), torch.zeros(3).double()):
        expected = rodrigues_rotate(rot.expand_as(points), points)
        assert torch.allclose(points @ rotation_matrix(rot).T, expected, rtol=0, atol=1e-15)
