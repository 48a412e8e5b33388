"""Issue 46: what ``jacbench.prepare`` is given, checked once, at prepare.

Every input it cannot differentiate is one ``jacbench.core.errors`` error naming what was
given and what to do: a point or output that is not one real floating-point tensor, a
random function, a function whose derivative is cut off part of it (numpy, no_grad, detach,
.item()). Before the fix these were raw AttributeError / TypeError / RuntimeError deep in a
strategy, or worse, answers: a reverse loop's Jacobian of a numpy round trip (relative error
0.5-0.7), two answers 0.67 apart for ``torch.no_grad`` inside f, a different Jacobian at
every call of a model in train mode. Scalar functions of scalars are supported (J of shape
``f(x).shape + x.shape`` as torch.func gives), and the caller's point is never written.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import torch

import jacbench
from jacbench.core.errors import (
    GraphCut,
    OutputMismatch,
    RandomFunction,
    StrategySkip,
    UnsupportedFunction,
)

EXACT = [("auto", {}), ("auto", {"compile": False}), ("jacfwd", {}), ("jacrev", {})]
ALL = [*EXACT, ("jacfwd_folded", {"compile": False}), ("functional", {}), ("fd_central", {})]
IDS = [f"{s}{o}" for s, o in ALL]


def nograd(x):
    with torch.no_grad():
        y = 2 * x
    return y + x


def detached(x):
    return x.detach() * x


def through_numpy(x):
    return torch.from_numpy(np.sin(x.detach().numpy())) + x


def itemised(x):
    return x * x.sum().item()


def through_data(x):
    return x.data * x


def listed(x):
    return torch.tensor(x.tolist(), dtype=x.dtype) * x


CUTS = {
    "torch.no_grad()": nograd,
    ".detach()": detached,
    ".numpy()": through_numpy,
    ".item()": itemised,
    ".data": through_data,
    ".tolist()": listed,
}


@pytest.mark.parametrize(("strategy", "options"), EXACT, ids=[f"{s}{o}" for s, o in EXACT])
@pytest.mark.parametrize("cut", CUTS)
def test_a_graph_cut_is_one_error_naming_it(cut, strategy, options):
    x = torch.randn(5, dtype=torch.float64)
    with pytest.raises(GraphCut, match=r"cuts part of its computation") as raised:
        jacbench.prepare(CUTS[cut], x, strategy, **options)
    message = str(raised.value)
    assert cut in message and "fd_central" in message


@pytest.mark.parametrize("cut", [".detach()", "torch.no_grad()"])
def test_a_cut_summed_to_fewer_outputs_is_refused_too(cut):
    """M < N: auto's reverse side (where no_grad hides the most) refuses it as well."""
    f = CUTS[cut]
    with pytest.raises(GraphCut, match=cut.replace("(", r"\(").replace(")", r"\)")):
        jacbench.prepare(lambda x: f(x).sum(0, keepdim=True), torch.randn(8))


def masked(x):
    return torch.where(x.detach() > 0, x, 2 * x)  # a detach that changes no derivative


def branches_on_item(x):
    return x * 2 if x[0].item() > 0 else x * 3


@pytest.mark.parametrize("f", [masked, branches_on_item])
def test_a_cut_that_changes_no_derivative_is_accepted(f):
    x = torch.randn(5, dtype=torch.float64)
    prep = jacbench.prepare(f, x, "jacrev")
    torch.testing.assert_close(prep(x), torch.func.jacrev(f)(x))


def test_finite_differences_see_f_as_it_is():
    x = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)
    prep = jacbench.prepare(through_numpy, x, "fd_central")
    expected = torch.diag(torch.cos(x)) + torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(prep(x), expected, rtol=1e-6, atol=1e-8)


SCALARS = {
    "scalar -> scalar": (lambda x: x**2, torch.tensor(3.0)),
    "scalar -> vector": (lambda x: torch.stack([x, x**2]), torch.tensor(3.0)),
    "vector -> scalar": (lambda x: (x**2).sum(), torch.tensor([1.0, 2.0])),
    "(1,) -> (1,)": (lambda x: x**2, torch.tensor([3.0])),
    "(2, 3) -> ()": (lambda x: (x**3).sum(), torch.ones(2, 3)),
}


@pytest.mark.parametrize(("strategy", "options"), ALL, ids=IDS)
@pytest.mark.parametrize("case", SCALARS)
def test_scalars_in_and_out_are_jacobians_shaped_as_torch_func_shapes_them(case, strategy, options):
    f, x = SCALARS[case]
    want = torch.func.jacrev(f)(x)
    prep = jacbench.prepare(f, x, strategy, **options)
    jac = prep(x)
    assert jac.shape == want.shape
    torch.testing.assert_close(jac, want, rtol=1e-3, atol=1e-3)
    value, jac = prep.value_and_jacobian(x)
    assert value.shape == f(x).shape and jac.shape == want.shape


OUTPUTS = {
    "tuple": (lambda x: (x * 2, x * 3), "tuple"),
    "dict": (lambda x: {"a": x * 2}, "dict"),
    "python float": (lambda x: float(x.sum()), "float"),
    "None": (lambda x: None, "NoneType"),
    "complex": (lambda x: x * (1 + 2j), "complex"),
    "int tensor": (lambda x: (x * 10).long(), "int64"),
    "empty": (lambda x: x[:0], "empty"),
}


@pytest.mark.parametrize("case", OUTPUTS)
def test_an_output_jacbench_cannot_differentiate_is_one_error(case):
    f, named = OUTPUTS[case]
    with pytest.raises(jacbench_error(), match=named):
        jacbench.prepare(f, torch.randn(3))


def jacbench_error() -> type:
    """What jacbench raises for a bad input: its ConfigError family (UnsupportedFunction)."""
    from jacbench.core.errors import ConfigError

    return ConfigError


POINTS = {
    "numpy array": (np.ones(3), "ndarray"),
    "list": ([1.0, 2.0], "list"),
    "int64": (torch.arange(3), "int64"),
    "bool": (torch.tensor([True, False]), "bool"),
    "complex64": (torch.randn(3, dtype=torch.complex64), "complex64"),
    "empty": (torch.randn(0), "no elements"),
    "meta": (torch.empty(3, device="meta"), "meta"),
}


@pytest.mark.parametrize("case", POINTS)
def test_a_point_jacbench_cannot_differentiate_at_is_one_error(case):
    x, named = POINTS[case]
    with pytest.raises(UnsupportedFunction, match=named):
        jacbench.prepare(torch.sin, x)


def test_a_function_that_is_not_callable_is_one_error():
    with pytest.raises(UnsupportedFunction, match="not a function"):
        jacbench.prepare(torch.ones(3), torch.ones(3))


@pytest.mark.parametrize(("strategy", "options"), ALL, ids=IDS)
def test_an_output_whose_size_changes_with_x_is_one_error_at_that_call(strategy, options):
    def positives(x):
        return x[x > 0] * 2

    x0 = torch.tensor([1.0, -1.0, 2.0, -2.0])
    if strategy == "jacfwd_folded":  # a traced graph holds one output size: refused
        with pytest.raises(StrategySkip, match="depends on x's values"):
            jacbench.prepare(positives, x0, strategy, **options)
        return
    prep = jacbench.prepare(positives, x0, strategy, **options)
    torch.testing.assert_close(prep(torch.tensor([3.0, -1.0, 5.0, -2.0]))[0, 0], torch.tensor(2.0))
    with pytest.raises(OutputMismatch, match=r"returned shape \(3,\) at this point and \(2,\)"):
        prep(torch.tensor([1.0, 1.0, 1.0, -1.0]))


@pytest.mark.parametrize(("strategy", "options"), ALL, ids=IDS)
def test_dropout_in_train_mode_is_one_error_naming_it_and_what_to_do(strategy, options):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 6))
    with pytest.raises(RandomFunction, match=r"it calls dropout.*model\.eval\(\)"):
        jacbench.prepare(net.double().train(), torch.randn(4, dtype=torch.float64), strategy)
    assert net.training  # the user's module is left as it was


def test_random_numbers_from_a_generator_seeded_inside_f_are_one_function():
    def noisy(x):
        gen = torch.Generator().manual_seed(0)
        return x + 0.1 * torch.randn(x.shape, generator=gen, dtype=x.dtype)

    x = torch.randn(4, dtype=torch.float64)
    torch.testing.assert_close(jacbench.prepare(noisy, x, "jacrev")(x), torch.eye(4).double())


@pytest.mark.parametrize(("strategy", "options"), ALL, ids=IDS)
def test_f_writing_into_its_input_never_changes_the_callers_point(strategy, options):
    def doubles_in_place(x):
        x.mul_(2)
        return torch.sin(x)

    x0 = torch.randn(5, dtype=torch.float64)
    prep = jacbench.prepare(doubles_in_place, x0.clone(), strategy, **options)
    x = torch.randn(5, dtype=torch.float64)
    kept = x.clone()
    jac = prep(x)
    value, _ = prep.value_and_jacobian(x)
    assert torch.equal(x, kept)
    tol = {"rtol": 1e-6, "atol": 1e-6} if strategy == "fd_central" else {}
    torch.testing.assert_close(jac, torch.diag(2 * torch.cos(2 * kept)), **tol)
    torch.testing.assert_close(value, torch.sin(2 * kept))


def counted(calls: list):
    def f(x):
        calls.append(1)
        return torch.sin(x) * 2

    return f


@pytest.mark.parametrize("strategy", ["auto", "jacfwd", "jacrev", "fd_central", "functional"])
def test_prepare_evaluates_f_at_most_twice_before_the_strategys_setup(strategy, monkeypatch):
    """Issue 45: it was about six (the shape, the model check, the vmap-or-loop probe...)."""
    calls: list = []
    registry = jacbench.core.registry.load_registry()
    spec = registry.get(strategy)
    before_setup: list = []

    def setup(problem, opts):
        before_setup.append(len(calls))
        return spec.setup(problem, opts)

    monkeypatch.setitem(registry.strategies, strategy, dataclasses.replace(spec, setup=setup))
    jacbench.prepare(counted(calls), torch.randn(5), strategy)
    assert len(before_setup) == 1 and before_setup[0] <= 2


def frames_to_f(make) -> int:
    """Python frames between a call of ``make(f)`` and f itself."""
    depth = []

    def f(t):
        frame, n = sys._getframe(), 0
        while frame is not None:
            n, frame = n + 1, frame.f_back
        depth.append(n)
        return t * 2

    call = make(f)
    depth.clear()
    call(torch.randn(3))
    return min(depth)


@pytest.mark.parametrize(
    ("strategy", "options", "direct"),
    [("auto", {"patience": 1e9}, "jacfwd"), ("jacfwd", {}, "jacfwd"), ("jacrev", {}, "jacrev")],
)
def test_a_prepared_call_passes_at_most_three_layers(strategy, options, direct):
    """Issue 45: tiered auto passed seven wrapper layers (and the module wrapper of f)."""
    x = torch.randn(3)
    prepared = frames_to_f(lambda f: jacbench.prepare(f, x, strategy, **options))
    plain = frames_to_f(getattr(torch.func, direct))
    assert prepared - plain <= 3
