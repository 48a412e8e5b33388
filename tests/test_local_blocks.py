"""Jacobians made of local blocks (``jacbench.Blocks``, bundle adjustment's observations):
every block's Jacobian in one vmapped pass, placed by the declared indices."""

from __future__ import annotations

import pytest
import torch

import jacbench
from jacbench.benchmark.problems import build_problem
from jacbench.core.errors import ConfigError
from jacbench.core.registry import load_registry

REGISTRY = load_registry()
CPU = torch.device("cpu")
SMALL_BA = {"_target_": "jacbench.models.adbench.BundleAdjustment", "n": 3, "m": 5, "p": 8}


def dense(jac) -> torch.Tensor:
    if hasattr(jac, "toarray"):
        return torch.as_tensor(jac.toarray())
    return jac.to_dense() if jac.layout != torch.strided else jac


@pytest.mark.parametrize("name", ["blocks_jacrev", "blocks_jacfwd"])
@pytest.mark.parametrize("output", ["dense", "csr", "scipy"])
def test_bundle_adjustments_observations_give_its_jacobian_at_two_points(name, output):
    problem = build_problem(SMALL_BA, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare(name, problem, output=output)
    assert prep.info.pattern_source == "declared blocks"
    for x in (problem.x, problem.x + 0.01 * torch.randn_like(problem.x)):
        expected = torch.func.jacrev(problem.f)(x)
        torch.testing.assert_close(dense(prep(x)), expected, rtol=1e-12, atol=1e-12)


def square_then_product(v: torch.Tensor) -> torch.Tensor:
    return torch.stack([v[0] * v[1], v[1] * v[1], v[2] * v[3], v[3] * v[3]])


def pair(g: torch.Tensor) -> torch.Tensor:  # a block's unknowns (a, b, b): (a b, b b)
    return torch.stack([g[0] * g[1], g[1] * g[2]])


def test_an_unknown_read_twice_by_a_block_adds_its_two_parts():
    blocks = jacbench.Blocks(
        torch.tensor([[0, 1, 1], [2, 3, 3]]), torch.tensor([[0, 1], [2, 3]]), pair
    )
    x = torch.tensor([0.5, -1.5, 2.0, 3.0], dtype=torch.float64)
    got = jacbench.prepare(square_then_product, x, "blocks_jacrev", blocks=blocks)(x)
    torch.testing.assert_close(got, torch.func.jacrev(square_then_product)(x))


def test_blocks_that_do_not_give_f_are_refused_naming_the_blocks():
    wrong = jacbench.Blocks(
        torch.tensor([[0, 0, 1], [2, 2, 3]]), torch.tensor([[0, 1], [2, 3]]), pair
    )
    x = torch.tensor([0.5, -1.5, 2.0, 3.0], dtype=torch.float64)
    with pytest.raises(ConfigError, match="declare blocks whose function gives"):
        jacbench.prepare(square_then_product, x, "blocks_jacrev", blocks=wrong)


@pytest.mark.parametrize(
    ("cols", "rows", "why"),
    [
        ([[0, 1]], [[0], [1]], "the same B"),
        ([[0, 9]], [[0, 1]], "cols must index 0..3"),
        ([[0, 1], [2, 3]], [[0, 1], [1, 2]], "rows repeat"),
    ],
)
def test_blocks_of_the_wrong_shape_are_refused_with_what_fits(cols, rows, why):
    blocks = jacbench.Blocks(torch.tensor(cols), torch.tensor(rows), pair)
    x = torch.ones(4, dtype=torch.float64)
    with pytest.raises(ConfigError, match=why):
        jacbench.prepare(square_then_product, x, "blocks_jacrev", blocks=blocks)


def test_without_blocks_it_is_one_block_the_dense_jacobian():
    x = torch.tensor([0.5, -1.5, 2.0, 3.0], dtype=torch.float64)
    prep = jacbench.prepare(square_then_product, x, "blocks_jacfwd")
    assert prep.info.pattern_source == "one block (none declared)"
    torch.testing.assert_close(prep(x), torch.func.jacrev(square_then_product)(x))


@pytest.mark.compiles
@pytest.mark.slow
def test_the_compiled_pass_by_blocks_is_exact_at_two_points():
    problem = build_problem(SMALL_BA, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare("blocks_jacrev", problem, compile=True, output="csr")
    for x in (problem.x, problem.x + 0.01 * torch.randn_like(problem.x)):
        expected = torch.func.jacrev(problem.f)(x)
        torch.testing.assert_close(prep(x).to_dense(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.compiles
@pytest.mark.slow
def test_settled_auto_answers_by_blocks_and_says_what_that_tier_decided():
    """A tiered auto's info is its current tier's: the compiled tier by blocks has no
    colours, where its first tier (by colours) had 14 (it read 14 before)."""
    cfg = {**SMALL_BA, "n": 20, "m": 200, "p": 4000}  # 12000 x 4820: too large to hold dense
    problem = build_problem(cfg, torch.float64, CPU, seed=0)
    prep = REGISTRY.prepare("auto", problem, cache=False)
    first = prep(problem.x)
    assert prep.info.n_colors is not None  # its first tier: by colours
    prep.settled()
    info = prep.info
    assert (info.chosen_strategy, info.tier) == ("blocks_jacrev", "compiled")
    assert info.n_colors is None and info.pattern_source == "declared blocks"
    v = torch.randn(problem.n_in, dtype=torch.float64)
    torch.testing.assert_close(prep(problem.x) @ v, first @ v, rtol=1e-12, atol=1e-10)
