"""Issue 43 (library part): a first Jacobian that does not pay for torch's compiler, tier
moves off the caller's path, forward mode by blocks of x, and auto right at two points in
every tier it takes.

Before: auto's first tier was torch.func's jacfwd, whose first call imports torch._dynamo
(~1 CPU-s in a fresh process); the call that reached a tier's cost built it (8-15 s of one
call for the compiled tier on seed004); tracing ran f in whatever thread built the tier;
forward mode carried every tangent through every layer, zero or not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from torch import nn

import jacbench
from jacbench.core.agreement import disagreement
from jacbench.core.blocks import by_blocks, spans
from jacbench.core.prepared import TORCH_STATE
from jacbench.core.problem import FunctionModule, make_problem
from jacbench.core.registry import load_registry
from jacbench.core.tiers import Stage, Tiered
from jacbench.core.torch_internals import trace_shapes_only
from jacbench.strategies.folded import by_reverse_twice

REGISTRY = load_registry()


def residual_problem(dtype: torch.dtype = torch.float64):
    """seed004's shape of problem, as a user writes it: an MLP's residuals as a function of
    its flat parameters (``FlatParams``: torch.func.functional_call inside)."""
    torch.manual_seed(0)
    samples = torch.rand(24, 3, dtype=dtype) * 4 - 2
    net = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2)).to(dtype)
    targets = torch.randn(24, 2, dtype=dtype)
    params = jacbench.FlatParams(net)

    def residuals(theta: torch.Tensor) -> torch.Tensor:
        return (params.call(theta, samples) - targets).reshape(-1)

    return residuals, params.vector()


FRESH = textwrap.dedent(
    """
    import sys, torch, jacbench
    from torch import nn
    torch.manual_seed(0)
    samples, targets = torch.rand(144, 3) * 4 - 2, torch.randn(144, 4)
    params = jacbench.FlatParams(nn.Sequential(nn.Linear(3, 10), nn.Tanh(), nn.Linear(10, 4)))
    residuals = lambda theta: (params.call(theta, samples) - targets).reshape(-1)
    theta = params.vector()
    J = jacbench.prepare(residuals, theta)(theta)
    right = torch.allclose(J, torch.autograd.functional.jacobian(residuals, theta), atol=1e-5)
    later = [f"jacbench.strategies.{m}" for m in ("compiled", "folded", "sparse", "func")]
    print(right, [m for m in ("torch._dynamo", "sympy", *later) if m in sys.modules])
    """
)


@pytest.mark.slow
def test_the_first_jacobian_of_a_fresh_process_imports_no_compiler():
    """What a user types: prepare and call once. The first tier is plain reverse-mode
    autograd: neither torch._dynamo (torch.func's first call, forward AD's first plain
    tensor) nor sympy (autograd's shape check of batched gradients) is imported, nor
    jacbench's modules of the later tiers (the registry loads a strategy at its first use,
    auto its candidates)."""
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True []", done.stderr[-2000:]


def test_auto_runs_nothing_outside_the_callers_thread():
    """Every move is made in the caller's thread, at its call (patience) or its settle():
    f runs nowhere else, and no thread of jacbench is left beside the caller's code (a
    build thread reached the caller's forward AD, its exit and its forks)."""
    residuals, theta = residual_problem()
    threads: set[int] = set()

    def f(t: torch.Tensor) -> torch.Tensor:
        threads.add(threading.get_ident())
        return residuals(t)

    before = set(threading.enumerate())
    prep = jacbench.prepare(f, theta, patience=0.0, cache=False)
    seen = []
    for k in range(12):
        x = theta + 0.01 * k
        torch.testing.assert_close(prep(x), torch.autograd.functional.jacobian(residuals, x))
        assert set(threading.enumerate()) <= before
        seen.append(prep.info.tier)
    assert "batched" in seen  # f's thread record cannot be traced: no traced tier
    assert threads == {threading.get_ident()}


def test_settle_builds_the_last_tier_alone_and_the_one_before_where_it_cannot():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 10)).double()
    p = make_problem("net", net, torch.randn(3, dtype=torch.float64), "input", False)
    built = []

    def stage(tier: str, fails: bool = False) -> Stage:
        def build():
            built.append(tier)
            if fails:
                raise jacbench.StrategySkip("no compiler here")
            return REGISTRY.prepare("jacfwd_folded", p, compile=False)

        return Stage(tier, build, cost_s=1e9)

    def tiers_with(*stages: Stage) -> Tiered:
        eager = REGISTRY.prepare("double_backward", p)
        return Tiered(eager, "eager", list(stages), lambda x, j: "", p.x)

    tiers = tiers_with(stage("batched"), stage("folded"), stage("compiled"))
    tiers.settle()
    assert (built, tiers.tier) == (["compiled"], "compiled")
    built.clear()
    tiers = tiers_with(stage("batched"), stage("folded"), stage("compiled", fails=True))
    tiers.settle()
    assert (built, tiers.tier) == (["compiled", "folded"], "folded")
    assert "no compiler here" in tiers.why


def test_new_tiers_are_checked_without_waiting_for_another_threads_turn():
    """The check of a new tier's first answer is by plain reverse mode: it takes no turn
    under TORCH_STATE (held by another preparation meanwhile), as forward mode's check
    did."""
    residuals, theta = residual_problem()
    J = torch.autograd.functional.jacobian(residuals, theta)
    out: list[str] = []
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with TORCH_STATE:
            holding.set()
            done.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    checker = threading.Thread(target=lambda: out.append(disagreement(residuals, theta, J, 48)))
    checker.start()
    checker.join(timeout=20)
    finished = not checker.is_alive()
    done.set()
    holder.join()
    checker.join()
    assert finished and out == [""]
    assert "differs" in disagreement(residuals, theta, J * 1.001, 48)


class OnceDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a.sin()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * a.cos()


class NumpyBackward(torch.autograd.Function):  # its gradient computed outside autograd
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a.sin()

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * torch.from_numpy(a.detach().numpy()).cos()


@pytest.mark.parametrize("function", [OnceDifferentiable, NumpyBackward])
@pytest.mark.parametrize("options", [{}, {"batched": True}, {"copies": True}])
def test_double_backward_falls_back_to_rows_where_the_backward_pass_is_not_differentiable(
    function, options
):
    """Reverse mode twice needs f's backward pass to be differentiable: where it is not
    (it raises, or gives zeros), the first call finds it and the rows are computed (with
    ``copies``, f's Function has no vmap rule either: the copies raise first)."""

    def f(v: torch.Tensor) -> torch.Tensor:
        return function.apply(v) * 2

    x = torch.randn(4, dtype=torch.float64)
    p = make_problem("f", FunctionModule(f), x, "input", False, output=f(x))
    prep = REGISTRY.prepare("double_backward", p, **options)
    for point in (x, x + 0.3):
        torch.testing.assert_close(prep(point), torch.diag(2 * point.cos()))


@pytest.mark.parametrize("batched", [False, True])
def test_double_backward_follows_a_batch_of_points(batched):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 7)).double()
    points = torch.randn(4, 3, dtype=torch.float64)
    p = make_problem("net", net, points, "input", False, batch=4)
    prep = REGISTRY.prepare("double_backward", p, batched=batched)
    for shift in (0.0, 0.2):
        got = prep(points + shift)
        for b in range(4):
            torch.testing.assert_close(got[b], torch.func.jacfwd(net)(points[b] + shift))


def test_the_slices_f_reads_x_through_are_found_and_only_they():
    def split(x):
        w, b, u = x.split([6, 2, 4])
        return torch.tanh(w.reshape(2, 3) @ u[:3] + b) * u[3]

    def sliced_with_a_gap(x):
        return torch.cat([x[0:3] * 2, x[5:8].sin()])

    def whole_and_slice(x):
        return x * x[0:1]

    def overlapping(x):
        return torch.cat([x[0:4], x[2:6]])

    x = torch.randn(12, dtype=torch.float64)
    found = {
        f.__name__: spans(trace_shapes_only(f, x), 12)
        for f in (split, sliced_with_a_gap, whole_and_slice, overlapping)
    }
    assert found == {
        "split": [(0, 6), (6, 8), (8, 12)],
        "sliced_with_a_gap": [(0, 3), (5, 8)],
        "whole_and_slice": None,
        "overlapping": None,
    }
    for f in (split, sliced_with_a_gap):
        both = by_blocks(trace_shapes_only(f, x), (x,), 0, by_reverse_twice)
        value, J = both(x)
        torch.testing.assert_close(value, f(x))
        torch.testing.assert_close(J, torch.func.jacfwd(f)(x))  # a gap: zero columns


def test_forward_mode_by_blocks_carries_each_slices_tangents_only_where_it_is_read():
    """On seed004's shape (a parameter vector split into W1, b1, W2, b2), the hidden
    layer's tangents are those of W1 and b1 alone: 18 and 6 of 38 here, not all 38."""
    residuals, theta = residual_problem()
    f = trace_shapes_only(residuals, theta)  # f's graph, as auto's tiers differentiate it

    def tangent_widths(jacobian) -> set[int]:
        """The tangent counts the hidden layer's derivative (tanh_backward) is taken of."""
        graph = torch.fx.experimental.proxy_tensor.make_fx(jacobian)(theta)
        return {
            node.meta["val"].shape[0]
            for node in graph.graph.nodes
            if node.target is torch.ops.aten.tanh_backward.default
            and node.meta["val"].dim() == 3  # (tangents, samples, hidden)
        }

    assert tangent_widths(by_reverse_twice(f)) == {38}
    assert tangent_widths(by_blocks(f, (theta,), 0, by_reverse_twice)) == {18, 6}
    p = make_problem("r", FunctionModule(residuals), theta, "input", False)
    folded = REGISTRY.prepare("jacfwd_folded", p, compile=False, forward_ad="never")
    for x in (theta, theta + 0.1):
        torch.testing.assert_close(folded(x), torch.autograd.functional.jacobian(residuals, x))


FORWARD_TIERS = ["eager", "batched", "folded"]
REVERSE_TIERS = ["eager", "batched"]


def auto_in(f, x0: torch.Tensor, tier: str, **options) -> jacbench.Prepared:
    """auto prepared at ``x0``, moved to ``tier`` (each move at the call that reaches it;
    the first call in it checked), and kept there."""
    prep = jacbench.prepare(f, x0, patience=0.0, cache=False, **options)
    for _ in range(8):
        if prep.info.tier == tier:
            prep.tiers.stages.clear()  # no further move
            prep(x0)  # its first call, checked
            return prep
        prep(x0)
    raise AssertionError(f"auto did not reach its {tier} tier: {prep.info.tier}")


@pytest.mark.parametrize("tier", FORWARD_TIERS)
def test_auto_is_right_at_two_points_in_every_forward_tier(tier):
    residuals, theta = residual_problem()
    prep = auto_in(residuals, theta, tier)
    for x in (theta + 0.3, theta - 0.2):
        torch.testing.assert_close(prep(x), torch.autograd.functional.jacobian(residuals, x))
        value, jac = prep.value_and_jacobian(x)
        torch.testing.assert_close(value, residuals(x))
    assert prep.info.tier == tier and prep.tiers.refused is None


@pytest.mark.parametrize("tier", REVERSE_TIERS)
def test_auto_is_right_at_two_points_in_every_reverse_tier(tier):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    x0 = torch.randn(12, dtype=torch.float64)
    prep = auto_in(net, x0, tier)
    for x in (x0 + 0.3, x0 - 0.2):
        torch.testing.assert_close(prep(x), torch.func.jacrev(net)(x))
    assert prep.info.tier == tier and prep.tiers.refused is None


@pytest.mark.compiles
@pytest.mark.slow
@pytest.mark.parametrize("shape", ["forward", "reverse"])
def test_auto_is_right_at_two_points_in_its_compiled_tier(shape):
    if shape == "forward":
        f, x0 = residual_problem()
    else:
        torch.manual_seed(0)
        f = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3)).double()
        x0 = torch.randn(12, dtype=torch.float64)
    prep = auto_in(f, x0, "compiled")
    for x in (x0 + 0.3, x0 - 0.2):
        torch.testing.assert_close(prep(x), torch.autograd.functional.jacobian(f, x))
    assert prep.info.tier == "compiled" and prep.tiers.refused is None


def compile_twice(residuals, theta) -> dict[str, int]:
    """The inductor cache's counts over a second preparation of the same compiled graph."""
    from torch._dynamo.utils import counters

    p = make_problem("r", FunctionModule(residuals), theta, "input", False)
    REGISTRY.prepare("jacfwd_folded", p, forward_ad="never")
    before = dict(counters["inductor"])
    prep = REGISTRY.prepare("jacfwd_folded", p, forward_ad="never")
    torch.testing.assert_close(prep(theta), torch.autograd.functional.jacobian(residuals, theta))
    return {k: v - before.get(k, 0) for k, v in counters["inductor"].items()}


@pytest.mark.compiles
@pytest.mark.slow
def test_a_compiled_graph_is_read_from_inductors_cache_where_jacbench_remembers(
    tmp_path, monkeypatch
):
    """Compiled without dynamo, a graph bypassed inductor's FX graph cache ("No shape env")
    and was compiled again in every process (the CLI's auto: 5.5 s a warm run against a
    2.1 s floor). Through standalone_compile it is read from the cache; with jacbench's
    remembering off (JACBENCH_CACHE_DIR="") it is not used."""
    residuals, theta = residual_problem()
    monkeypatch.setenv("JACBENCH_CACHE_DIR", str(tmp_path))
    assert compile_twice(residuals, theta).get("fxgraph_cache_hit", 0) == 1
    monkeypatch.setenv("JACBENCH_CACHE_DIR", "")
    assert compile_twice(residuals, theta).get("fxgraph_cache_hit", 0) == 0
