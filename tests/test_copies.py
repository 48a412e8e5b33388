"""Issue 43 (the whole fit): the first tier batches its passes over copies of x, and a tier
move pays before it is made and gives way where it turns out slower.

Before: auto's first tier computed seed004's columns one backward pass at a time (7 ms a
call, float64) and moved to ``is_grads_batched`` after 0.27 s of calls, paying sympy's
import (0.27 CPU-s) that a 300-iteration fit never earned back: the fit was 0.69-0.76x the
finite-difference loop's speed. Now the columns (or rows) come from one vmapped batch of
copies of x (2.6 ms, nothing imported), a move that halves a call waits until the calls
spent twice its cost, and a form that needs no trace and is slower than the one before
over its first calls gives way to it again.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import jacbench
from jacbench.core.problem import make_problem
from jacbench.core.registry import load_registry

REGISTRY = load_registry()


def residuals_problem(batch: int = 1):
    """seed004's shape: more outputs than inputs (forward mode's side)."""
    torch.manual_seed(0)
    samples, targets = torch.rand(20, 3, dtype=torch.float64), torch.randn(20, 2).double()
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    params = jacbench.FlatParams(net)

    def residuals(theta: torch.Tensor) -> torch.Tensor:
        return (params.call(theta, samples) - targets).reshape(-1)

    return residuals, params.vector()


def wide_problem():
    """More inputs than outputs (reverse mode's side)."""
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(30, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    return net, torch.randn(30, dtype=torch.float64)


@pytest.mark.parametrize("name", ["double_backward", "autograd_loop"])
@pytest.mark.parametrize("shape", ["tall", "wide"])
def test_the_copies_give_the_jacobian_and_the_value_at_two_points(name, shape):
    f, x0 = residuals_problem() if shape == "tall" else wide_problem()
    prep = jacbench.prepare(f, x0, name, copies=True)
    for x in (x0 + 0.3, x0 - 0.2):
        torch.testing.assert_close(prep(x), torch.func.jacrev(f)(x))
        value, jac = prep.value_and_jacobian(x)
        torch.testing.assert_close(value, f(x))
        torch.testing.assert_close(jac, torch.func.jacrev(f)(x))


@pytest.mark.parametrize("name", ["double_backward", "autograd_loop"])
def test_the_copies_follow_a_batch_of_points_and_a_matrix_valued_f(name):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 7)).double()
    points = torch.randn(4, 3, dtype=torch.float64)
    p = make_problem("net", net, points, "input", False, batch=4)
    prep = REGISTRY.prepare(name, p, copies=True)
    for shift in (0.0, 0.2):
        got = prep(points + shift)
        for b in range(4):
            torch.testing.assert_close(got[b], torch.func.jacfwd(net)(points[b] + shift))

    def outer(v: torch.Tensor) -> torch.Tensor:  # (3,) -> (3, 3)
        return torch.outer(v.sin(), v)

    v = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(
        jacbench.prepare(outer, v, name, copies=True)(v), torch.func.jacrev(outer)(v)
    )


def test_the_copies_are_split_into_chunks_where_they_would_be_large(monkeypatch):
    """Many copies of a large output are made a chunk at a time (the same Jacobian)."""
    from jacbench.strategies import autograd

    f, x0 = residuals_problem()
    monkeypatch.setattr(autograd, "COPIES_MAX_OUTPUTS", 3 * f(x0).numel())  # 3 copies a chunk
    for name in ("double_backward", "autograd_loop"):
        prep = jacbench.prepare(f, x0, name, copies=True)
        torch.testing.assert_close(prep(x0 + 0.1), torch.func.jacrev(f)(x0 + 0.1))


def branchy(v: torch.Tensor) -> torch.Tensor:
    """Python control flow on a value of x: vmap cannot batch it (its copies raise)."""
    return v * 2 if float(v.detach().sum()) > 0 else v * 3


@pytest.mark.parametrize("name", ["double_backward", "autograd_loop"])
def test_where_f_cannot_be_copied_the_first_call_finds_it_and_the_plain_passes_answer(name):
    x = torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64)
    prep = jacbench.prepare(branchy, x, name, copies=True)
    for point, slope in ((x, 2.0), (-x, 3.0)):
        torch.testing.assert_close(prep(point), slope * torch.eye(3, dtype=torch.float64))
    # a custom Function without a vmap rule: tests/test_library_speed.py::
    # test_double_backward_falls_back_to_rows_where_the_backward_pass_is_not_differentiable


@pytest.mark.parametrize("columns", [True, False])
@pytest.mark.parametrize("plain_s, f_s, chosen", [(0.0, 0.05, False), (0.2, 0.0, True)])
def test_the_copies_are_kept_only_where_they_are_no_slower_than_the_plain_passes(
    columns, plain_s, f_s, chosen
):
    """The first call answers by the checked copies, the second by the plain passes (timed),
    the third by the copies (timed warm), and from then on by the faster where it is clearly
    faster: here the plain passes are an answer known beforehand, returned after 0.2 s, or
    at once where f (so each batch of copies) sleeps 0.05 s."""
    from jacbench.strategies.autograd import CopiesOrPlain

    residuals, x0 = residuals_problem()

    def f(theta: torch.Tensor) -> torch.Tensor:
        if f_s:
            time.sleep(f_s)
        return residuals(theta)

    p = make_problem("residuals", f, x0, "input", False)
    known = (f(x0), torch.func.jacrev(f)(x0))
    plain_calls: list[int] = []

    def plain(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        plain_calls.append(1)
        if plain_s:
            time.sleep(plain_s)
        return known

    both = CopiesOrPlain(p, plain, columns)
    for call in range(5):
        value, jac = both(x0)
        torch.testing.assert_close(jac, known[1])
        torch.testing.assert_close(value, known[0])
        assert both.use is (None if call < 2 else chosen)
    assert len(plain_calls) == (1 if chosen else 3)  # the second call's, then every call's


def test_near_a_tie_the_copies_choice_takes_three_calls_of_each_and_their_best():
    """One interrupted call does not decide: within 2x, three timed calls each, the best of
    each compared."""
    from jacbench.strategies.autograd import copies_chosen

    assert copies_chosen([], [1.0]) is None
    assert copies_chosen([0.3], [1.0]) is True  # clear after one each
    assert copies_chosen([2.5], [1.0]) is False
    assert copies_chosen([1.5], [1.0]) is None  # within 2x: more
    assert copies_chosen([1.5, 1.4], [1.0, 1.2]) is None
    assert copies_chosen([1.5, 0.9], [1.0, 1.2, 1.3]) is None  # the plain passes' turn taken
    assert copies_chosen([1.5, 0.9, 1.6], [1.0, 1.2, 1.3]) is True  # best 0.9 against 1.0
    assert copies_chosen([1.5, 1.1, 1.6], [1.0, 1.2, 1.3]) is False


def test_copies_and_batched_are_one_choice():
    with pytest.raises(ValueError, match="set one of them"):
        REGISTRY.get("double_backward").make_options({"copies": True, "batched": True})


def test_autos_first_tier_copies_x_and_imports_nothing_more():
    """In this process sympy may be imported already: the first tier's strategy and options
    are checked here, its imports in a fresh process
    (tests/test_library_speed.py::test_the_first_jacobian_of_a_fresh_process_imports_no_compiler)."""
    f, x0 = residuals_problem()
    prep = jacbench.prepare(f, x0, cache=False)
    assert (prep.info.tier, prep.info.chosen_strategy) == ("eager", "double_backward")
    assert "copies=True" in prep.tiers.current.info.built
    torch.testing.assert_close(prep(x0), torch.func.jacrev(f)(x0))
    net, x1 = wide_problem()
    prep = jacbench.prepare(net, x1, cache=False)
    assert (prep.info.tier, prep.info.chosen_strategy) == ("eager", "autograd_loop")
    assert "copies=True" in prep.tiers.current.info.built
