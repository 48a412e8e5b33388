"""ADBench's bundle adjustment (issue 31): the model, its declared pattern, colours at their
bound, and a reference that scales (sampled where a dense float64 reference cannot fit)."""

from __future__ import annotations

import pytest
import torch

from helpers.cli import compose_job
from jacbench.core import memory_budget, sparsity
from jacbench.core.problem import build_problem
from jacbench.core.reference import SAMPLED_METHOD, References, sampled_entries, sampled_reference
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
    assert result.n_colors == result.colors_lower_bound == 15
    if strategy == "auto":
        assert result.chosen_strategy == "sparse_jacfwd"  # the rows would need 48 colours


def test_auto_weighs_the_compiled_sparse_side_where_the_jacobian_is_too_large(monkeypatch):
    from jacbench.strategies.auto import candidates

    monkeypatch.setattr(memory_budget, "DENSE_REFERENCE_MAX", 1000)
    problem = build_problem(SMALL, torch.float64, CPU, 0)
    assert candidates(problem, compile=True) == [
        ("sparse_jacfwd", {"output": "csr"}),
        ("sparse_jacfwd", {"output": "csr", "compile": True}),
    ]
    assert candidates(problem, compile=False) == [("sparse_jacfwd", {"output": "csr"})]
