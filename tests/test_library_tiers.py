"""auto's moves to a new tier are checked, and a wrong or failing tier is left.

A new tier's first answer, at the prepared point, is compared with reverse mode's derivative
of f along a random direction (``jacbench.core.agreement``); where it raises or disagrees,
the Jacobian stays in the tier before, warns once (naming the tier and why), and records
the event (``tiers.refused``). Moves happen at ``settle()`` or, with a ``patience``, at the
call that reaches the next tier's cost, in the caller's thread: never behind its back.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import replace

import pytest
import torch

from jacbench.core.agreement import disagreement
from jacbench.core.problem import FunctionModule, make_problem
from jacbench.core.registry import load_registry
from jacbench.core.tiers import Stage, Tiered

REGISTRY = load_registry()


def problem():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 10))
    net = net.double()
    return make_problem("net", net, torch.randn(3, dtype=torch.float64), "input", False)


def tiers_with(later, name: str = "folded", patience: float | None = 0.0) -> tuple[Tiered, object]:
    """Tiered jacfwd (eager), then ``later`` built as its next tier at the first call."""
    p = problem()
    eager = REGISTRY.prepare("jacfwd", p)

    def check(x, jac):
        return disagreement(p.f, x, jac, p.n_out)

    stages = [Stage(name, lambda: later(p), cost_s=0.0)]
    return Tiered(eager, "eager", stages, check, p.x, patience=patience), p


def wrong(p):
    right = REGISTRY.prepare("jacfwd", p)
    return replace(right, fn=lambda x: 2 * right.fn(x), strategy="doubled")


def failing(p):
    right = REGISTRY.prepare("jacfwd", p)

    def raises(x):
        raise RuntimeError("kernel exploded")

    return replace(right, fn=raises, strategy="exploding")


def expected(p, x):
    return torch.func.jacfwd(p.f)(x)


@pytest.mark.parametrize(("later", "reason"), [(wrong, "differs"), (failing, "kernel exploded")])
def test_a_new_tier_that_is_wrong_or_fails_is_left_for_good_and_said_once(later, reason):
    tiers, p = tiers_with(later)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = tiers.jac(p.x)  # eager; its time reaches the stage's cost: built, checked
        points = [p.x + 0.1 * k for k in range(1, 6)]
        answers = [tiers.jac(x) for x in points]
        value, jac = tiers.both(p.x)
    for x, answer in zip(points, answers, strict=True):
        torch.testing.assert_close(answer, expected(p, x))
    torch.testing.assert_close(first, expected(p, p.x))
    torch.testing.assert_close(jac, expected(p, p.x))
    torch.testing.assert_close(value, p.f(p.x))
    assert (tiers.tier, tiers.chosen_strategy, tiers.stages) == ("eager", "jacfwd", [])
    said = [w for w in seen if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1
    assert "folded tier" in str(said[0].message) and reason in str(said[0].message)
    refused = tiers.refused
    assert (refused.tier, refused.back_to) == ("folded", "eager") and reason in refused.reason


def test_a_tier_that_fails_to_build_is_refused_and_said():
    def broken(p):
        raise MemoryError("no room for the graph")

    tiers, p = tiers_with(broken)
    with pytest.warns(RuntimeWarning, match="no room for the graph"):
        tiers.jac(p.x)  # the build, at this call, in this thread
    torch.testing.assert_close(tiers.jac(p.x), expected(p, p.x))
    assert tiers.tier == "eager" and tiers.refused.tier == "folded"


def test_a_right_new_tier_is_kept_without_a_word():
    tiers, p = tiers_with(lambda p: REGISTRY.prepare("jacfwd_folded", p, compile=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(4):
            x = p.x + 0.1 * k
            torch.testing.assert_close(tiers.jac(x), expected(p, x))
    assert (tiers.tier, tiers.chosen_strategy, tiers.refused) == ("folded", "jacfwd_folded", None)


def test_settle_checks_each_new_tier_at_the_prepared_point():
    tiers, p = tiers_with(wrong)
    with pytest.warns(RuntimeWarning, match="differs"):
        tiers.settle()
    assert tiers.tier == "eager" and tiers.refused is not None


def test_without_patience_no_call_builds_and_settle_moves():
    """The default: calls never build (no stall, nothing behind the caller's back); the
    caller's settle() builds the last tier, in its own thread."""
    built_in: list[str] = []

    def folded(p):
        import threading

        built_in.append(threading.current_thread().name)
        return REGISTRY.prepare("jacfwd_folded", p, compile=False)

    tiers, p = tiers_with(folded, patience=None)
    for k in range(20):
        tiers.jac(p.x + 0.01 * k)
    assert (tiers.tier, built_in) == ("eager", [])
    tiers.settle()
    assert tiers.tier == "folded" and built_in == [threading.current_thread().name]
    assert tiers.history == ["eager (jacfwd)", "folded (jacfwd_folded)"]
    torch.testing.assert_close(tiers.jac(p.x), expected(p, p.x))


def test_the_check_takes_a_batch_of_points_and_sparse_matrices():
    p = problem()
    points = torch.randn(3, 3, dtype=torch.float64)
    many = torch.stack([expected(p, x) for x in points])
    f_many = torch.func.vmap(p.f)
    assert disagreement(f_many, points, many, p.n_out) == ""
    assert "differs" in disagreement(f_many, points, 1.01 * many, p.n_out)
    assert disagreement(p.f, p.x, expected(p, p.x).to_sparse_csr(), p.n_out) == ""


def test_a_plain_function_problem_calls_f_itself():
    """No wrapper between a strategy and a plain function of a vector (issue 45)."""

    def f(x):
        return torch.sin(x)

    x = torch.ones(3)
    p = make_problem("f", FunctionModule(f), x, "input", False, output=f(x))
    assert p.f is f
