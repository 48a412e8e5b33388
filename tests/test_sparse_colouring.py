"""Fast colouring (issue 43): first-fit greedy, compiled, at most asdex's colours; every
colouring valid (no two columns of a colour share a row) whichever routine made it, and the
compiled routine's answer checked like data from outside."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jacbench.benchmark.problems import build_problem
from jacbench.core import colouring, sparsity
from jacbench.models.pde import Laplacian2D, banded_pattern

CPU = torch.device("cpu")


def random_pattern(m: int, n: int, density: float, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((m, n)) < density)
    return rows.astype(np.int64), cols.astype(np.int64)


def shares_no_row(rows: np.ndarray, cols: np.ndarray, colors: np.ndarray, m: int) -> bool:
    """The definition, by brute force: each row's columns have distinct colours."""
    for i in range(m):
        mine = colors[cols[rows == i]]
        if len(np.unique(mine)) != len(mine):
            return False
    return True


@pytest.mark.parametrize("density", [0.02, 0.1, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_routine_and_order_gives_a_valid_colouring(density, seed):
    m, n = 70, 90
    rows, cols = random_pattern(m, n, density, seed)
    pattern = colouring.ColumnRows(rows, cols, (m, n))
    orders = [np.arange(n), np.random.default_rng(seed).permutation(n)]
    for order in orders:
        ptr, ordered_rows = pattern.ordered(order)
        for routine in (colouring._compiled_first_fit, colouring._python_first_fit):
            colors = np.empty(n, dtype=np.int64)
            colors[order] = routine(m, n, ptr, ordered_rows)
            assert shares_no_row(rows, cols, colors, m)
            assert colouring.is_valid(pattern, colors)
    for thorough in (False, True):
        colors = colouring.color_columns(rows, cols, (m, n), thorough)
        assert shares_no_row(rows, cols, colors, m)
        assert colors.max() + 1 >= colouring.lower_bound(rows, m)


def test_both_first_fit_routines_agree_colour_for_colour():
    """The compiled routine is first-fit in column order, as the Python one is."""
    rows, cols = random_pattern(120, 150, 0.05, 3)
    pattern = colouring.ColumnRows(rows, cols, (120, 150))
    ptr, ordered = pattern.ordered(np.arange(150))
    compiled = colouring._compiled_first_fit(120, 150, ptr, ordered)
    assert np.array_equal(compiled, colouring._python_first_fit(120, 150, ptr, ordered))


def test_a_colouring_that_shares_a_row_is_found_invalid():
    rows, cols = np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2])  # columns 0-1 and 1-2 meet
    pattern = colouring.ColumnRows(rows, cols, (2, 3))
    assert colouring.is_valid(pattern, np.array([0, 1, 0]))
    assert not colouring.is_valid(pattern, np.array([0, 0, 1]))
    assert not colouring.is_valid(pattern, np.array([0, 1]))  # a column left out
    assert not colouring.is_valid(pattern, np.array([0, -1, 0]))


def test_a_wrong_answer_from_the_compiled_routine_is_not_used(monkeypatch):
    """scipy's grouping is not public API: a routine that changed under us (here: one colour
    for every column) is caught and the Python first-fit used instead."""
    rows, cols = random_pattern(50, 60, 0.1, 4)
    monkeypatch.setattr(colouring, "_compiled_first_fit", lambda m, n, p, r: np.zeros(n, int))
    colors = colouring.color_columns(rows, cols, (50, 60))
    assert shares_no_row(rows, cols, colors, 50) and colors.max() > 0


def test_banded_patterns_get_their_bandwidth_and_the_stencil_asdex_s_seven_or_five():
    for half in (1, 2, 4):
        band = sparsity.from_tensor(banded_pattern(300, half), (300, 300))
        assert int(sparsity.color_columns(band).max()) + 1 == 2 * half + 1
    stencil = sparsity.from_tensor(Laplacian2D(40).jacobian_sparsity(), (1600, 1600))
    colors = sparsity.color_columns(stencil)
    assert int(colors.max()) + 1 == 7  # first-fit, as asdex's greedy (7)
    thorough = sparsity.color_columns(stencil, thorough=True)  # DSATUR: the bound
    assert int(thorough.max()) + 1 == sparsity.lower_bound(stencil) == 5
    mask = stencil.to_dense().numpy()
    for found in (colors.numpy(), thorough.numpy()):
        assert shares_no_row(*np.nonzero(mask), found, 1600)


def test_the_ba_pattern_takes_the_bound_and_rows_are_coloured_by_the_transpose():
    problem = build_problem(
        {"_target_": "jacbench.models.adbench.BundleAdjustment", "n": 5, "m": 40, "p": 120},
        torch.float64,
        CPU,
        0,
    )
    pattern = sparsity.from_tensor(problem.sparsity(), (problem.n_out, problem.n_in))
    colors = sparsity.color_columns(pattern)
    assert int(colors.max()) + 1 == sparsity.lower_bound(pattern) == 15
    by_rows = sparsity.color_rows(pattern)
    flipped = pattern.transposed
    flat = flipped.rows.numpy(), flipped.cols.numpy()
    assert shares_no_row(*flat, by_rows.numpy(), flipped.shape[0])
