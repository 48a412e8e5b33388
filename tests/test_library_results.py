"""Issue 46 (S1): a prepared Jacobian is a new tensor at every call, in every tier.

Where J does not depend on x (2x, cumsum, a linear residual), the traced graph of auto's
folded tier computed it once (hoisted) and returned that one buffer at every call: a caller's
``J *= w`` (a weighted least-squares step) changed every later answer, compounding (relative
error 0.67, 2, 4.67 over three iterations).
"""

from __future__ import annotations

import pytest
import torch

import jacbench

A = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
LINEAR = {
    "2x": lambda x: 2 * x,
    "x + 1": lambda x: x + 1,
    "cumsum": lambda x: torch.cumsum(x, 0),
    "flip": lambda x: torch.flip(x, (0,)),
    "A @ x": lambda x: A @ x,
    "cat([x, 3x])": lambda x: torch.cat([x, 3 * x]),
    "x (itself)": lambda x: x,
}
EAGER = [
    ("auto", {"patience": 1e9}),  # its eager tier
    ("jacfwd_folded", {"compile": False}),  # auto's folded tier
    ("auto", {"compile": False}),
    ("jacfwd", {}),
    ("jacrev", {}),
    ("sparse_jacfwd", {}),
    ("fd_central", {}),
]


def assert_fresh(prep: jacbench.Prepared, f, x1: torch.Tensor, x2: torch.Tensor) -> None:
    expected = torch.func.jacrev(f)(x2)
    j1, j2 = prep(x1), prep(x2)
    assert j1.untyped_storage().data_ptr() != j2.untyped_storage().data_ptr()
    j1.mul_(0).add_(7.0)  # the caller's own in-place use of an answer
    torch.testing.assert_close(prep(x2), expected)
    point, value_at = x2.clone(), f(x2).clone()
    value, jac = prep.value_and_jacobian(x2)
    jac.mul_(3.0)
    value.mul_(5.0)
    assert torch.equal(x2, point)  # the value is not the caller's point (f = identity)
    value, jac = prep.value_and_jacobian(x2)
    torch.testing.assert_close(jac, expected)
    torch.testing.assert_close(value, value_at)


@pytest.mark.parametrize(("strategy", "options"), EAGER, ids=[f"{s}{o}" for s, o in EAGER])
@pytest.mark.parametrize("label", LINEAR)
def test_an_answer_changed_by_its_caller_changes_no_later_answer(label, strategy, options):
    f = LINEAR[label]
    gen = torch.Generator().manual_seed(1)
    x0, x1, x2 = (torch.randn(6, generator=gen, dtype=torch.float64) for _ in range(3))
    prep = jacbench.prepare(f, x0, strategy, **options)
    for _ in range(3):
        prep(x0)
    assert_fresh(prep, f, x1, x2)


def test_a_weighted_least_squares_loop_on_a_linear_residual_stays_exact():
    """The issue's loop: default prepare, J *= w at every iteration, in auto's folded tier."""
    y = torch.randn(25, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

    def residual(theta):
        return torch.cat([theta - y, 0.5 * (theta[1:] - theta[:-1])])

    theta = torch.zeros(25, dtype=torch.float64)
    w = torch.linspace(1.0, 2.0, 49, dtype=torch.float64)[:, None]
    prep = jacbench.prepare(residual, theta, "jacfwd_folded", compile=False)
    expected = torch.func.jacrev(residual)(theta) * w
    for _ in range(4):
        _, jac = prep.value_and_jacobian(theta)
        jac *= w
        torch.testing.assert_close(jac, expected)


@pytest.mark.compiles
@pytest.mark.slow
def test_the_compiled_tier_returns_a_new_tensor_too():
    gen = torch.Generator().manual_seed(3)
    x0, x1, x2 = (torch.randn(6, generator=gen, dtype=torch.float64) for _ in range(3))
    f = LINEAR["cumsum"]
    prep = jacbench.prepare(f, x0, patience=0.0, cache=False).settled()
    assert prep.info.tier == "compiled"
    assert_fresh(prep, f, x1, x2)
