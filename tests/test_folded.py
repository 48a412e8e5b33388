"""Forward mode with its tangents folded into matrix products (issue 33): the graph pass
leaves no broadcast batched product, the folded Jacobian is exact on every zoo model at two
points, a function whose graph depends on its values is refused, and auto's tiers (eager
first, compiled once the calls paid for it) give the same Jacobians in each tier."""

from __future__ import annotations

import warnings

import pytest
import torch
import yaml
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.shape_prop import ShapeProp

from helpers.contract import jacobian_at
from jacbench.benchmark.problems import build_problem
from jacbench.core.errors import StrategySkip
from jacbench.core.fold import (
    NARROW,
    _broadcast,
    fold,
    fresh_outputs,
    optimised,
    traced,
    transpose_narrow,
)
from jacbench.core.registry import load_registry
from jacbench.core.tiers import Stage, Tiered
from jacbench.run.config import conf_dir
from jacbench.strategies.folded import value_and_jacobian

REGISTRY = load_registry()
CPU = torch.device("cpu")
ZOO = ["mlp", "cnn", "transformer", "seed000_mlp", "seed002_reciprocal", "seed004_lm", "burgers"]


def problem_of(name: str, dtype: torch.dtype = torch.float64, **changes: object):
    cfg = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())
    return build_problem({**cfg, **changes}, dtype, CPU, seed=0)


def broadcast_products(gm) -> int:
    return sum(
        1
        for node in gm.graph.nodes
        if node.target is torch.ops.aten.bmm.default and any(map(_broadcast, node.args))
    )


def test_the_pass_folds_seed004s_broadcast_products_into_plain_ones():
    problem = problem_of("seed004_lm")
    graph = traced(value_and_jacobian(problem), problem.f, problem.x)
    before = broadcast_products(graph)
    assert before == 2  # x @ dW1 and h @ dW2, one per layer
    assert fold(graph) == before and broadcast_products(graph) == 0
    value, jac = graph(problem.x)
    assert torch.equal(value, problem.f(problem.x))
    torch.testing.assert_close(jac, torch.func.jacfwd(problem.f)(problem.x), rtol=0, atol=1e-14)


def product_shapes(gm, x: torch.Tensor) -> list[tuple[int, int]]:
    """The (rows, columns) of each matrix product of the graph, run at x."""
    ShapeProp(gm).propagate(x)
    return [
        tuple(node.meta["tensor_meta"].shape)
        for node in gm.graph.nodes
        if node.target is torch.ops.aten.mm.default
    ]


def narrow(shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(rows, columns) for rows, columns in shapes if columns <= NARROW < rows]


def test_seed004s_narrow_output_layer_product_is_computed_transposed_with_the_same_result():
    problem = problem_of("seed004_lm")
    graph = traced(value_and_jacobian(problem), problem.f, problem.x)
    fold(graph)
    value, jac = graph(problem.x)
    assert transpose_narrow(graph, (problem.x,)) == 1
    shapes = product_shapes(graph, problem.x)
    assert narrow(shapes) == [] and (4, 12096) in shapes  # was (12096, 10) x (10, 4)
    again_value, again_jac = graph(problem.x)
    assert torch.equal(again_value, value)
    torch.testing.assert_close(again_jac, jac, rtol=0, atol=1e-15)


def test_small_or_broadcast_narrow_products_are_left_as_they_are():
    problem = problem_of("seed004_lm", n_samples=4)  # (336, 10) x (10, 4): too small to pay
    graph = traced(value_and_jacobian(problem), problem.f, problem.x)
    fold(graph)
    assert transpose_narrow(graph, (problem.x,)) == 0
    assert narrow(product_shapes(graph, problem.x)) == [(336, 4)]


@torch.library.custom_op("jacbench_test::opaque_double", mutates_args=())
def opaque_double(t: torch.Tensor) -> torch.Tensor:
    """An op with no fake kernel: no shapes can be propagated through it."""
    return t * 2


def test_a_graph_whose_shapes_cannot_be_propagated_is_left_as_it_is():
    a, b = torch.randn(5000, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    graph = make_fx(lambda t: opaque_double(t) @ b)(a)
    assert transpose_narrow(graph, (a,)) == 0  # a (5000, 3) x (3, 2) product, left alone
    torch.testing.assert_close(graph(a), 2 * a @ b)


@pytest.mark.parametrize("model", ZOO)
def test_folded_forward_mode_is_exact_on_every_zoo_model_at_two_points(model):
    problem = problem_of(model)
    prep = REGISTRY.prepare("jacfwd_folded", problem, compile=False)
    other = problem.x + 0.1 * torch.randn_like(problem.x)
    for x in (problem.x, other):
        torch.testing.assert_close(prep(x), jacobian_at(problem, x), rtol=1e-10, atol=1e-12)
        value, jac = prep.value_and_jacobian(x)
        torch.testing.assert_close(value, problem.f(x), rtol=1e-12, atol=1e-12)


def test_folded_forward_mode_follows_a_batch_of_points():
    problem = problem_of("mlp", batch=3)
    prep = REGISTRY.prepare("jacfwd_folded", problem, compile=False)
    expected = torch.stack([torch.func.jacfwd(problem.f)(p) for p in problem.x])
    torch.testing.assert_close(prep(problem.x), expected, rtol=1e-10, atol=1e-12)


def branching(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.sum() > 0 else x * 3  # one graph cannot hold both branches


def indexed(x: torch.Tensor) -> torch.Tensor:
    return x * x[torch.argmax(x)]  # an index read off the values, baked into a graph


@pytest.mark.parametrize("f", [branching, indexed])
def test_a_function_whose_graph_depends_on_its_values_is_refused(f):
    import jacbench

    x = torch.arange(4, dtype=torch.float64)
    with pytest.raises(StrategySkip, match="cannot trace f into one graph"):
        jacbench.prepare(f, x, "jacfwd_folded", compile=False)


def test_auto_stays_eager_until_it_is_settled():
    import jacbench

    problem = problem_of("seed004_small")
    prep = jacbench.prepare(problem.f, problem.x, cache=False)
    for _ in range(3):
        torch.testing.assert_close(prep(problem.x), jacobian_at(problem, problem.x))
        value, jac = prep.value_and_jacobian(problem.x)
        torch.testing.assert_close(value, problem.f(problem.x))
        torch.testing.assert_close(jac, jacobian_at(problem, problem.x))
    assert prep.one_pass
    # nothing traced or compiled, nothing built: plain reverse-mode autograd
    assert (prep.info.tier, prep.info.decided_by) == ("eager", "rule")
    assert prep.info.chosen_strategy == "double_backward"
    assert [stage.tier for stage in prep.tiers.stages][-2:] == ["folded", "compiled"]


def test_a_tier_that_cannot_compile_stays_eager_and_says_why():
    problem = problem_of("seed004_small")
    eager = REGISTRY.prepare("jacfwd_folded", problem, compile=False)

    def no_compiler():
        raise StrategySkip("torch.compile failed here: no compiler")

    stages = [Stage("compiled", no_compiler, cost_s=0.0)]
    tiers = Tiered(eager, "folded", stages, lambda x, jac: "", problem.x, patience=0.0)
    first = tiers.jac(problem.x)  # spent >= 0: moves on, fails, stays
    assert (tiers.tier, tiers.why) == ("folded", "compiled: torch.compile failed here: no compiler")
    torch.testing.assert_close(tiers.jac(problem.x), first)
    assert not tiers.stages  # tried once, not at every call


@pytest.mark.compiles
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_auto_gives_the_same_jacobians_in_every_tier(dtype, tmp_path, monkeypatch):
    import jacbench
    from jacbench.core import decisions

    monkeypatch.setenv(decisions.ENV, str(tmp_path))
    problem = problem_of("seed004_lm", dtype)
    other = problem.x + 0.1 * torch.randn_like(problem.x)
    # each move at the call that reaches its cost, in this thread
    prep = jacbench.prepare(problem.f, problem.x, patience=0.0)
    tiers = []
    for x in (problem.x, other, problem.x):
        tiers.append(prep.info.tier)
        torch.testing.assert_close(prep(x), jacobian_at(problem, x).to(dtype))
        tiers.append(prep.info.tier)
        value, jac = prep.value_and_jacobian(x)  # one pass in every tier
        torch.testing.assert_close(value, problem.f(x))
        torch.testing.assert_close(jac, jacobian_at(problem, x).to(dtype))
    assert tiers == ["eager", "batched", "folded", "compiled", "compiled", "compiled"]
    settled = jacbench.prepare(problem.f, problem.x).settled()  # the runner's way
    assert settled.info.tier == "compiled"
    torch.testing.assert_close(settled(other), jacobian_at(problem, other).to(dtype))


@pytest.mark.parametrize(
    "compile", [False, pytest.param(True, marks=[pytest.mark.compiles, pytest.mark.slow])]
)
def test_a_replaced_parameter_or_rebound_closure_is_traced_again_not_used_stale(compile):
    """A traced graph holds the module's tensors as constants: updated in place (as an
    optimiser does) it sees them; replaced, it would have gone on with the old ones."""
    import jacbench

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 20))
    net = net.double()
    x = torch.randn(3, dtype=torch.float64)
    prep = jacbench.prepare(net, x, "jacfwd_folded", compile=compile)
    with torch.no_grad():
        net[0].weight.mul_(2.0)  # in place
    torch.testing.assert_close(prep(x), torch.func.jacfwd(net)(x))
    net[0].weight = torch.nn.Parameter(torch.randn(8, 3, dtype=torch.float64))  # replaced
    torch.testing.assert_close(prep(x), torch.func.jacfwd(net)(x))
    net[2] = torch.nn.Linear(8, 20).double()  # a submodule replaced
    torch.testing.assert_close(prep(x), torch.func.jacfwd(net)(x))
    net[1].register_buffer("unused", torch.zeros(1))  # a buffer added: traced again, still exact
    torch.testing.assert_close(prep(x), torch.func.jacfwd(net)(x))

    scale = torch.tensor(2.0, dtype=torch.float64)

    def f(v):
        return net(v) * scale

    prep = jacbench.prepare(f, x, "jacfwd_folded", compile=compile)
    scale = torch.tensor(-3.0, dtype=torch.float64)  # the closure's variable, rebound
    torch.testing.assert_close(prep(x), torch.func.jacfwd(f)(x))

    global SHIFT
    prep = jacbench.prepare(shifted, x, "jacfwd_folded", compile=compile)
    SHIFT = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)  # a global, rebound
    try:
        torch.testing.assert_close(prep(x), torch.func.jacfwd(shifted)(x))
    finally:
        SHIFT = torch.ones(3, dtype=torch.float64)


def test_a_tensor_replaced_at_every_call_is_read_as_an_input():
    """A closure tensor rebound at every call is a graph input of dynamo's capture: right
    at every call, and never traced again for it."""
    import jacbench

    x = torch.randn(3, dtype=torch.float64)
    scale = torch.tensor(1.0, dtype=torch.float64)

    def f(v):
        return torch.sin(v) * scale

    prep = jacbench.prepare(f, x, "jacfwd_folded", compile=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(16):
            scale = torch.tensor(float(step), dtype=torch.float64)  # a new tensor each time
            torch.testing.assert_close(prep(x), torch.func.jacfwd(f)(x))
    assert not [w for w in seen if "traced again" in str(w.message)]


SHIFT = torch.ones(3, dtype=torch.float64)


def shifted(v: torch.Tensor) -> torch.Tensor:
    """A function of a global tensor (rebound by the test above)."""
    return torch.sin(v * SHIFT)


B = torch.randn(5, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(9))


def folded_then_viewed(x):
    """bmm with a broadcast operand (folded: its result's layout changes), then viewed."""
    out = torch.bmm(x.unsqueeze(0).expand(5, 2, 3), B)
    return out.view(10, 4) * 2


def written_through_a_view(x):
    out = torch.bmm(x.unsqueeze(0).expand(5, 2, 3), B)
    out.view(10, 4).add_(1.0)  # a write the base must see
    return out


def read_by_strides(x):
    out = torch.bmm(x.unsqueeze(0).expand(5, 2, 3), B)
    return out.as_strided((5, 8), (8, 1)) * 1.0  # the memory as it lay before the fold


def bmm_nodes(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.bmm.default)


@pytest.mark.parametrize(
    ("f", "kept"),
    [(folded_then_viewed, True), (written_through_a_view, False), (read_by_strides, False)],
)
def test_a_pass_is_kept_only_where_the_graph_stays_valid_for_any_strides(f, kept):
    """Issue 46: the fold left a permuted result that a later view could not take (seed004 as
    a plain function raised); a view becomes a reshape, unless a write goes through it or a
    later operation reads memory by strides: then the graph stays as traced."""
    x = torch.randn(2, 3, dtype=torch.float64)
    graph = make_fx(f)(x)
    done = optimised(graph, (x,), [lambda g, _: fold(g)])
    assert (bmm_nodes(done) == 0) is kept
    for point in (x, torch.randn(2, 3, dtype=torch.float64)):
        torch.testing.assert_close(done(point), f(point))


def test_an_output_that_is_a_constant_of_the_graph_is_a_new_tensor_at_each_call():
    constant = torch.ones(3, dtype=torch.float64)
    graph = make_fx(lambda x: (x * 2, constant))(torch.ones(3, dtype=torch.float64))
    assert fresh_outputs(graph) == 1
    (_, first), (_, second) = graph(torch.ones(3)), graph(torch.ones(3))
    first.mul_(0)
    assert torch.equal(second, constant) and torch.equal(constant, torch.ones(3).double())
