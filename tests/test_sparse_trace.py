"""The pattern recorded without torch's compiler (issue 43: ba1's first call): f's operations
recorded as it runs on a wrapped x (jacbench.core.dispatch_trace) give make_fx's pattern on
the zoo and on the functions of issue 30, refuse what they cannot prove (make_fx then traces
as before), and a fresh process's first sparse Jacobian imports neither torch._dynamo nor
sympy; auto's first sparse tier computes its passes with plain autograd."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from test_sparse_proved import X_DEPENDENT, A

import jacbench
from jacbench.benchmark.problems import build_problem
from jacbench.core import dispatch_trace
from jacbench.core.pattern_trace import Tracer, Unprovable, traced_pattern
from jacbench.core.registry import load_registry
from jacbench.models.adbench import BundleAdjustment

CPU = torch.device("cpu")
HT = "jacbench.models.hand_tracking.HandTracking"
ZOO = {  # the zoo's sparse models: bench_sparse's problems, bundle adjustment, hand tracking
    "burgers": {"_target_": "jacbench.models.pde.Burgers1D", "n": 300},
    "laplacian": {"_target_": "jacbench.models.pde.Laplacian2D", "n": 20},
    "per-sample mlp": {"_target_": "jacbench.models.mlp.PerSampleMLP", "samples": 6, "n_in": 3},
    "bundle adjustment": {
        "_target_": "jacbench.models.adbench.BundleAdjustment",
        "n": 5,
        "m": 9,
        "p": 40,
    },
    "ht simple": {"_target_": HT, "variant": "simple", "file": "hand2_t26_c192.txt"},
    "ht complicated": {"_target_": HT, "variant": "complicated", "file": "hand2_t26_c192.txt"},
}
N = 64
MORE = {  # beyond issue 30's: folded constants, moves, views, batching inside f
    "tridiagonal stored dense": lambda x: A @ x,
    "softmax by rows": lambda x: torch.softmax(x.reshape(8, 8), -1).reshape(-1),
    "cumsum": lambda x: torch.cumsum(x, 0),
    "conv": lambda x: torch.nn.functional.conv1d(
        x.reshape(1, 1, -1), torch.ones(1, 1, 3, dtype=x.dtype), padding=1
    ).reshape(-1),
    "split and unbind": lambda x: torch.cat(
        [a * b for a, b in zip(x.split(8), x.flip(0).reshape(8, 8).unbind(0), strict=True)]
    ),
    "pad": lambda x: torch.nn.functional.pad(x, (1, 1))[1:-1] * 2,
    "constant index": lambda x: x[torch.tensor([3, 1, 2] * 21 + [0])],
    "constant mask": lambda x: x[torch.arange(N) % 2 == 0].repeat(2),
    "eye on x's device": lambda x: torch.eye(N, dtype=x.dtype, device=x.device) @ x,
    "vmap inside f": lambda x: torch.func.vmap(lambda r: r.sum() * r)(x.reshape(8, 8)).reshape(-1),
    "einsum": lambda x: torch.einsum("ij,jk->ik", x.reshape(8, 8), x.reshape(8, 8)).reshape(-1),
}


def _pattern(f, x, n_out, tracer) -> object:
    """The traced entries as a set of (row, col), or "unprovable"."""
    try:
        rows, cols = traced_pattern(f, x, n_out, tracer)
    except Unprovable:
        return "unprovable"
    return set(zip(rows.tolist(), cols.tolist(), strict=True))


@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_recording_gives_make_fx_s_pattern_on_the_zoo(name):
    problem = build_problem(ZOO[name], torch.float64, CPU, 0)
    x = problem.points[0]
    recorded = _pattern(problem.f, x, problem.n_out, Tracer.DISPATCH)
    assert recorded != "unprovable"
    assert recorded == _pattern(problem.f, x, problem.n_out, Tracer.MAKE_FX)


@pytest.mark.parametrize("name", sorted({**X_DEPENDENT, **MORE}))
def test_the_recording_gives_make_fx_s_pattern_on_functions_of_the_issues(name):
    f = {**X_DEPENDENT, **MORE}[name]
    x = torch.randn(N, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    made = _pattern(f, x, f(x).numel(), Tracer.MAKE_FX)
    by_default = _pattern(f, x, f(x).numel(), Tracer.AUTO)
    assert by_default == made
    if name != "argmax_item":  # x[argmax(x)] reads an index into Python: refused (below)
        assert _pattern(f, x, f(x).numel(), Tracer.DISPATCH) == made


def _written_after_read(x: torch.Tensor) -> torch.Tensor:
    w = torch.ones(N, dtype=x.dtype)
    y = x * w
    w.fill_(0.0)  # the graph would hold the zeros: x * w folded away in y too
    return y + x * w


def _through_a_view(x: torch.Tensor) -> torch.Tensor:
    y = x * 1.0
    y[:4].mul_(3.0)
    return y


REFUSED = {
    "item": (lambda x: torch.full_like(x, x.sum().item()) * x, "_local_scalar_dense"),
    "bool": (lambda x: x * 2 if bool(x.sum() > 0) else x, "_local_scalar_dense"),
    "numpy": (lambda x: torch.from_numpy(x.numpy() * 2), "numpy"),
    "tolist": (lambda x: torch.tensor(x.tolist()) * x, "tolist"),
    "nonzero": (lambda x: x * torch.nonzero(x > 0).numel(), "nonzero"),
    "mask from x": (lambda x: x[x > 0].sum() * x, "index"),
    "in place": (lambda x: x.clone().mul_(2.0), "mul_"),
    "through a view": (_through_a_view, "mul_"),
    "a constant written after it was read": (_written_after_read, "constant"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_recording_cannot_prove_it_refuses_and_make_fx_traces(name):
    """A value of x read into Python, a shape that depends on values, a write into a tensor:
    recorded, each would give a pattern of the traced point alone (the written constant:
    an empty pattern where the Jacobian is the identity). The default tracer then gives
    make_fx's answer."""
    f, why = REFUSED[name]
    x = torch.randn(N, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with pytest.raises(dispatch_trace.Refused, match=why):
        dispatch_trace.record(f, x)
    n_out = f(x).numel()
    assert _pattern(f, x, n_out, Tracer.AUTO) == _pattern(f, x, n_out, Tracer.MAKE_FX)


@pytest.mark.parametrize(
    "f, entries",
    [
        (lambda x: torch.where(torch.arange(N) < 10, x, torch.roll(x, 1)), N),
        (lambda x: torch.tensor([1.0, 0.0] * (N // 2), dtype=x.dtype) * x, N // 2),
    ],
)
def test_a_constant_zero_factor_or_condition_folds_in_the_pattern(f, entries):
    """scipy 1.17 refuses a boolean sparse product: a constant zero factor or ``where``
    condition made the tracer give up (a dense pattern: 64 colours where one suffices)."""
    x = torch.randn(N, dtype=torch.float64)
    for tracer in (Tracer.DISPATCH, Tracer.MAKE_FX):
        rows, cols = traced_pattern(f, x, N, tracer)
        mask = np.zeros((N, N), dtype=bool)
        mask[rows, cols] = True
        jac = torch.func.jacfwd(f)(torch.randn(N, dtype=torch.float64)).numpy()
        assert len(rows) == entries and np.array_equal(mask, jac != 0)


@pytest.mark.parametrize("passes", ["autograd", "autograd_batched"])
@pytest.mark.parametrize("strategy", ["sparse_jacfwd", "sparse_jacrev"])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_autograd_passes_give_the_functorch_passes_jacobian(strategy, batch, passes):
    problem = build_problem({**ZOO["bundle adjustment"], "batch": batch}, torch.float64, CPU, 0)
    registry = load_registry()
    plain = registry.prepare(strategy, problem, passes=passes)
    functorch = registry.prepare(strategy, problem)
    gen = torch.Generator().manual_seed(4)
    for _ in range(2):
        x = problem.x + 0.1 * torch.randn(problem.x.shape, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(plain(x), functorch(x), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "options, why",
    [({"passes": "vjp"}, "passes must be one of"), ({"passes": "autograd", "compile": True}, "")],
)
def test_the_passes_option_is_checked(options, why):
    problem = build_problem(ZOO["burgers"], torch.float64, CPU, 0)
    with pytest.raises(Exception, match=why or "compile"):
        load_registry().prepare("sparse_jacfwd", problem, **options)


FRESH = """
import sys, torch, jacbench
from jacbench.models.adbench import BundleAdjustment
model = BundleAdjustment(n=5, m=9, p=12000).double()  # 36000 outputs: one colour at a time
x = model.sample_input(None)
prep = jacbench.prepare(model, x)
J = prep(x)
imported = [m for m in ("torch._dynamo", "sympy") if m in sys.modules]
v = torch.randn(x.shape, dtype=x.dtype)
Jv = torch.func.jvp(model, (x,), (v,))[1]
right = torch.allclose(J @ v, Jv, atol=1e-10, rtol=1e-12)
print(right, prep.info.pattern_source.split(",")[0], imported)
"""


@pytest.mark.slow
def test_a_first_sparse_jacobian_of_a_fresh_process_imports_no_compiler():
    """What a user types: prepare a model that declares its pattern, and call once. Tracing
    the pattern by make_fx, torch.func's JVPs and their check each imported torch._dynamo
    and sympy (~0.8 CPU-s, a third of ba1's first call)."""
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True declared []", done.stderr[-2000:]


@pytest.mark.parametrize("p, passes", [(40, "autograd_batched"), (12000, "autograd")])
def test_auto_s_first_sparse_tier_takes_plain_autograd_s_passes(p, passes):
    """Batched over the colours where f's output is small (its operations dispatch-bound),
    one colour at a time where it is large (ba1: 94 ms a call against 115 batched)."""
    model = BundleAdjustment(n=5, m=9, p=p).double()
    x = model.sample_input(None)
    prep = jacbench.prepare(model, x)
    assert prep.info.tier == "eager"
    assert prep.info.built.endswith(f"passes={passes}"), prep.info.built


class _Roots(torch.nn.Module):
    """sqrt of each entry, plus its right neighbour: a bidiagonal pattern, declared."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x) + torch.roll(x, -1)

    def jacobian_sparsity(self) -> torch.Tensor:
        eye = torch.eye(self.n, dtype=torch.bool)
        return eye | torch.roll(eye, 1, 1)


@pytest.mark.parametrize("strategy", ["sparse_jacfwd", "auto"])
@pytest.mark.parametrize(("n", "checked"), [(64, 128), (6, 36)])
def test_a_dense_sparse_answer_is_checked_for_nan_on_its_pattern_alone_where_it_is_sparse(
    strategy, n, checked
):
    """Summing the whole dense answer to find NaN read 31 MB a call on hand tracking c=800
    (0.6 of 2.2 ms); its pattern's entries are the only ones that can be NaN. Where they are
    not far fewer than its numbers (n = 6: 12 of 36), reading them by index costs more than
    the sum (hand tracking simple c=3200, 34% of its entries: 175 against 25 us a call)."""
    x = torch.ones(n, dtype=torch.float64)
    x[2] = 0.0  # sqrt's derivative is infinite there
    prep = jacbench.prepare(_Roots(n), x + 1.0, strategy)
    with pytest.warns(jacbench.NonFiniteJacobian, match=f"NaN or infinite entries of {checked} at"):
        jac = prep(x)
    assert not bool(torch.isfinite(jac[2, 2]))
