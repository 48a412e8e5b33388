"""Issue 46: the library on the user's own ways of writing one residual.

seed004's residual (an MLP 3-10-4 fit over 144 samples: N = 84 parameters, M = 576
residuals) written as plain functions of the flat parameter vector theta in eleven ways, and
a convolution and an RBF residual, through every tier auto takes, in both dtypes, each
compared with a float64 ``torch.autograd.functional.jacobian`` at 20 points over 150 calls.
Before the fix the slices-and-reshape and split-and-view forms raised "view size is not
compatible with input tensor's size and stride" once auto reached its folded tier: the fold
pass left a permuted matmul result that a later ``view`` could not take.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jacbench

SHAPES = [(10, 3), (10,), (4, 10), (4,)]  # W1, b1, W2, b2
SIZES = [math.prod(s) for s in SHAPES]
POINTS, CALLS = 20, 150
Form = Callable[[torch.Tensor], torch.Tensor]


def data(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(4)
    samples = torch.randn(144, 3, generator=gen, dtype=torch.float64)
    targets = torch.randn(144, 4, generator=gen, dtype=torch.float64)
    return samples.to(dtype), targets.to(dtype)


def net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 10), nn.Tanh(), nn.Linear(10, 4))


def slices_and_reshape(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)

    def residual(theta):
        params, start = [], 0
        for shape, size in zip(SHAPES, SIZES, strict=True):
            params.append(theta[start : start + size].reshape(shape))
            start += size
        W1, b1, W2, b2 = params
        return (torch.tanh(X @ W1.T + b1) @ W2.T + b2 - Y).reshape(-1)

    return residual


def split_and_view(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)

    def residual(theta):
        W1, b1, W2, b2 = (c.view(s) for c, s in zip(torch.split(theta, SIZES), SHAPES, strict=True))
        hidden = torch.tanh(X @ W1.T + b1)
        return (hidden @ W2.T + b2 - Y).view(-1)

    return residual


def unflatten_and_einsum(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)

    def residual(theta):
        W1 = theta[:30].unflatten(0, (10, 3))
        W2 = theta[40:80].unflatten(0, (4, 10))
        hidden = torch.tanh(torch.einsum("si,hi->sh", X, W1) + theta[30:40])
        return (torch.einsum("sh,oh->so", hidden, W2) + theta[80:] - Y).flatten()

    return residual


def functional_call(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)
    module = net().to(dtype)
    names = [name for name, _ in module.named_parameters()]

    def residual(theta):
        chunks = torch.split(theta, SIZES)
        params = {n: c.view(s) for n, c, s in zip(names, chunks, SHAPES, strict=True)}
        return (torch.func.functional_call(module, params, (X,)) - Y).reshape(-1)

    return residual


def transposed_weights(dtype: torch.dtype) -> Form:
    """Weights stored input-major (x @ W) in one layer and applied from the left (W @ x.T)
    in the other: the products the fold rewrites come with other layouts."""
    X, Y = data(dtype)

    def residual(theta):
        W1 = theta[:30].reshape(3, 10)  # x @ W
        W2 = theta[40:80].reshape(4, 10)  # W @ h.T
        hidden = torch.tanh(X @ W1 + theta[30:40])
        return ((W2 @ hidden.T).T + theta[80:] - Y).reshape(-1)

    return residual


def flat_params(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)
    flat = jacbench.FlatParams(net().to(dtype))
    return lambda theta: (flat.call(theta, X) - Y).reshape(-1)


def index_select(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)
    index = [torch.arange(s, s + n) for s, n in zip([0, 30, 40, 80], SIZES, strict=True)]

    def residual(theta):
        W1, b1, W2, b2 = (
            theta.index_select(0, i).view(s) for i, s in zip(index, SHAPES, strict=True)
        )
        return (torch.tanh(X @ W1.T + b1) @ W2.T + b2 - Y).reshape(-1)

    return residual


def gather_by_index(dtype: torch.dtype) -> Form:
    """Parameters picked by integer index tensors (a permutation of theta)."""
    X, Y = data(dtype)
    order = torch.randperm(84, generator=torch.Generator().manual_seed(1))

    def residual(theta):
        W1, b1, W2, b2 = (
            c.reshape(s) for c, s in zip(theta[order].split(SIZES), SHAPES, strict=True)
        )
        return (torch.tanh(X @ W1.T + b1) @ W2.T + b2 - Y).reshape(-1)

    return residual


class BufferedResidual(nn.Module):
    """A module whose data are buffers and whose input is theta."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        samples, targets = data(dtype)
        self.register_buffer("samples", samples)
        self.register_buffer("targets", targets)

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        W1, b1, W2, b2 = (c.view(s) for c, s in zip(torch.split(theta, SIZES), SHAPES, strict=True))
        hidden = torch.tanh(F.linear(self.samples, W1, b1))
        return (F.linear(hidden, W2, b2) - self.targets).view(-1)


def buffers_module(dtype: torch.dtype) -> Form:
    return BufferedResidual(dtype)


def addmm(dtype: torch.dtype) -> Form:
    X, Y = data(dtype)

    def residual(theta):
        W1, b1, W2, b2 = (c.view(s) for c, s in zip(torch.split(theta, SIZES), SHAPES, strict=True))
        hidden = torch.tanh(torch.addmm(b1, X, W1.t()))
        return (torch.addmm(b2, hidden, W2.t()) - Y).view(-1)

    return residual


def as_strided(dtype: torch.dtype) -> Form:
    """Parameters read from theta's memory by explicit strides."""
    X, Y = data(dtype)

    def residual(theta):
        W1 = theta.as_strided((10, 3), (3, 1), 0)
        W2 = theta.as_strided((4, 10), (10, 1), 40)
        hidden = torch.tanh(X @ W1.T + theta[30:40])
        return (hidden @ W2.T + theta[80:] - Y).reshape(-1)

    return residual


def conv_residual(dtype: torch.dtype) -> Form:
    """A convolution's 76 parameters (4 kernels 2x3x3, 4 biases) fit to a 4x10x10 target."""
    gen = torch.Generator().manual_seed(5)
    image = torch.randn(1, 2, 12, 12, generator=gen, dtype=torch.float64).to(dtype)
    target = torch.randn(1, 4, 10, 10, generator=gen, dtype=torch.float64).to(dtype)

    def residual(theta):
        weight, bias = theta[:72].view(4, 2, 3, 3), theta[72:]
        return (torch.tanh(F.conv2d(image, weight, bias)) - target).view(-1)

    return residual


def rbf_residual(dtype: torch.dtype) -> Form:
    """8 Gaussian bumps in 2-D (centres, log widths, weights: 32 parameters) at 100 samples."""
    gen = torch.Generator().manual_seed(6)
    samples = torch.rand(100, 2, generator=gen, dtype=torch.float64).to(dtype)
    target = torch.sin(3 * samples).sum(1)

    def residual(theta):
        centres, log_width, weight = theta[:16].view(8, 2), theta[16:24], theta[24:]
        distance = ((samples[:, None, :] - centres[None]) ** 2).sum(-1)
        return (torch.exp(-distance / (2 * torch.exp(2 * log_width))) @ weight) - target

    return residual


FORMS = {
    f.__name__: f
    for f in (
        slices_and_reshape,
        split_and_view,
        unflatten_and_einsum,
        functional_call,
        transposed_weights,
        flat_params,
        index_select,
        gather_by_index,
        buffers_module,
        addmm,
        as_strided,
        conv_residual,
        rbf_residual,
    )
}
SIZE = {"conv_residual": 76, "rbf_residual": 32}


def points(name: str, dtype: torch.dtype) -> list[torch.Tensor]:
    """The first point (prepared at), then 19 more around it (float64, then cast)."""
    n = SIZE.get(name, 84)
    gen = torch.Generator().manual_seed(7)
    theta0 = 0.5 * torch.randn(n, generator=gen, dtype=torch.float64)
    more = [theta0 + 0.3 * torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(19)]
    return [p.to(dtype) for p in [theta0, *more]]


REFERENCES: dict[str, list[torch.Tensor]] = {}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: the machine's cores are shared by the test workers."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def references(name: str) -> list[torch.Tensor]:
    """torch.autograd.functional.jacobian of the float64 form at the 20 points (once)."""
    if name not in REFERENCES:
        f = FORMS[name](torch.float64)
        REFERENCES[name] = [  # forward mode: N < M columns, vectorized
            torch.autograd.functional.jacobian(f, p, vectorize=True, strategy="forward-mode")
            for p in points(name, torch.float64)
        ]
    return REFERENCES[name]


def assert_exact(prep: jacbench.Prepared, name: str, dtype: torch.dtype, calls: int) -> list:
    """``calls`` calls cycling through the 20 points, each against its reference; the tiers
    the calls were made in."""
    tiers = []
    at, expected = points(name, dtype), references(name)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for k in range(calls):
        i = k % POINTS
        if k % 10 == 9:
            _, jac = prep.value_and_jacobian(at[i])
        else:
            jac = prep(at[i])
        tiers.append(prep.info.tier)
        scale = float(expected[i].abs().max())
        error = float((jac.to(torch.float64) - expected[i]).abs().max()) / scale
        assert error <= tol, (name, dtype, k, prep.info.tier, error)
    return tiers


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", FORMS)
def test_each_form_is_exact_in_the_eager_and_folded_tiers(name, dtype):
    f = FORMS[name](dtype)
    x0 = points(name, dtype)[0]
    eager = jacbench.prepare(
        f,
        x0,
    )  # auto, in its eager tier until settled
    assert set(assert_exact(eager, name, dtype, CALLS // 2)) <= {"eager", "batched"}
    # auto's folded tier: the traced (as reverse mode twice, by blocks where f slices x),
    # folded and hoisted graph, exactly as auto builds it
    folded = jacbench.prepare(
        f, x0, "jacfwd_folded", compile=False, on_retrace_storm="raise", forward_ad="never"
    )
    assert_exact(folded, name, dtype, CALLS - CALLS // 2)


COMPILED = list(FORMS)  # every form, float32; one in float64 (each compiles twice: ~5 s)


@pytest.mark.compiles
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "dtype"),
    [(n, torch.float32) for n in COMPILED] + [("split_and_view", torch.float64)],
    ids=[f"{n}-float32" for n in COMPILED] + ["split_and_view-float64"],
)
def test_forms_are_exact_through_every_tier_auto_takes(name, dtype):
    f = FORMS[name](dtype)
    x0 = points(name, dtype)[0]
    # moves at its first calls (each at the call that reaches it)
    prep = jacbench.prepare(f, x0, patience=0.0, cache=False)
    tiers = assert_exact(prep, name, dtype, CALLS)
    assert tiers[:4] == ["batched", "folded", "compiled", "compiled"]  # eager for the first
    assert prep.tiers.refused is None
    settled = jacbench.prepare(f, x0, cache=False).settled()
    assert settled.info.tier == "compiled"
    assert_exact(settled, name, dtype, POINTS)
