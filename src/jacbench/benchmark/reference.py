"""The reference Jacobian a strategy is judged against, and how far it can be trusted.

Every exact float64 method that applies (reverse, forward, the model's formula) is computed; a
strategy is judged against one not of its own mode, and the disagreement with the next method
is the reference's uncertainty: over a job's tolerance, the verdict is undecided. f must give
one value at one point, and float64 central differences must match the reference (catching a
graph cut every AD method shares). All in float64, on CPU, never timed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from jacbench.core.enums import Mode
from jacbench.core.float64 import Float64Mode, Fn, in_float64

if TYPE_CHECKING:
    from jacbench.core.problem import Problem

ANALYTIC, FORWARD, REVERSE = "analytic", "forward_float64", "reverse_float64"
# Preference of reference methods per strategy mode: never the strategy's own mode first.
PREFERENCE: dict[Mode, tuple[str, ...]] = {
    Mode.REVERSE: (ANALYTIC, FORWARD, REVERSE),
    Mode.FORWARD: (ANALYTIC, REVERSE, FORWARD),
    Mode.ANALYTIC: (REVERSE, FORWARD, ANALYTIC),
}
DEFAULT_PREFERENCE = (ANALYTIC, REVERSE, FORWARD)
# A method is used only where its passes per point stay under the larger of these two: a
# fixed count, and a multiple of the cheaper exact mode's passes.
PASS_LIMIT = 16384
PASS_RATIO = 64
# Basis vectors pushed through at once: bounds the reference's memory for large Jacobians.
CHUNK_NUMBERS = 1 << 22


def _chunk(n_in: int, n_out: int) -> int:
    return max(1, CHUNK_NUMBERS // max(1, n_in + n_out))


def _unit_rows(
    indices: torch.Tensor, n: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The rows ``indices`` of the n x n identity."""
    rows = torch.zeros(len(indices), n, dtype=dtype, device=device)
    rows[torch.arange(len(indices)), indices] = 1
    return rows


def reverse_jacobian(f: Fn, x: torch.Tensor, n_out: int) -> torch.Tensor:
    """M vector-Jacobian products, in chunks; a row loop where vmap has no rule."""
    try:
        return torch.func.jacrev(f, chunk_size=_chunk(x.numel(), n_out))(x)
    except Exception:
        return _row_loop(f, x, n_out)


def _row_loop(f: Fn, x: torch.Tensor, n_out: int) -> torch.Tensor:
    """One vector-Jacobian product per output, written into one preallocated matrix."""
    with torch.enable_grad():
        point = x.detach().requires_grad_(True)
        y = f(point).reshape(-1)
        out = torch.zeros(n_out, x.numel(), dtype=y.dtype, device=x.device)
        for i in range(n_out):
            (row,) = torch.autograd.grad(y[i], point, retain_graph=True, allow_unused=True)
            if row is not None:
                out[i] = row.reshape(-1)
    return out


def forward_jacobian(f: Fn, x: torch.Tensor, n_out: int) -> torch.Tensor:
    """N Jacobian-vector products, in chunks; a loop where vmap has no rule."""
    n = x.numel()

    def jvp(v: torch.Tensor) -> torch.Tensor:
        return torch.func.jvp(f, (x,), (v,))[1].reshape(-1)

    def basis(start: int, stop: int) -> torch.Tensor:
        return _unit_rows(torch.arange(start, stop), n, x.dtype, x.device)

    step = _chunk(n, n_out)
    out = torch.empty(n_out, n, dtype=x.dtype, device=x.device)
    batched = True
    for start in range(0, n, step):
        stop = min(n, start + step)
        if batched:
            try:
                out[:, start:stop] = torch.func.vmap(jvp)(basis(start, stop)).T
                continue
            except Exception:
                batched = False
        for j, v in enumerate(basis(start, stop), start):
            out[:, j] = jvp(v)
    return out


PROBE_DIRECTIONS = 3  # random directions of the finite-difference probe
PROBE_SLACK = 1e-7  # relative mismatch the probe tolerates beyond its own error bound
DETERMINISM_TOL = 1e-12  # relative difference of two calls at one point still taken as equal


def deterministic(f: Fn, x: torch.Tensor) -> str:
    """ "" when two calls of ``f`` at ``x`` agree; else why the reference cannot be trusted."""
    with torch.no_grad():
        a, b = f(x.clone()), f(x.clone())
    gap = _rel(a, b) if torch.isfinite(a).all() and torch.isfinite(b).all() else 0.0
    if gap > DETERMINISM_TOL:
        return (
            f"the function is not deterministic: two calls at the same point differ by {gap:.2g} "
            "(relative), so no Jacobian of it can be judged (random ops, a call counter, state "
            "that changes between calls)"
        )
    return ""


def fd_probe(
    f: Fn, x: torch.Tensor, jv: Callable[[torch.Tensor], torch.Tensor], method: str, seed: int = 0
) -> str:
    """ "" when ``jv(v) = J v`` matches float64 central differences of ``f`` along random unit
    directions within their own error bound (the gap between steps h and 2h, plus rounding);
    else the mismatch. A direction that leaves the function's domain is skipped."""
    gen = torch.Generator().manual_seed(seed)
    eps = torch.finfo(torch.float64).eps
    h = eps ** (1 / 3) * max(1.0, float(x.abs().max()))
    with torch.no_grad():
        for _ in range(PROBE_DIRECTIONS):
            v = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x)
            v = v / torch.linalg.norm(v)
            values = {k: f(x + k * h * v).reshape(-1) for k in (-2, -1, 1, 2)}
            if not all(torch.isfinite(y).all() for y in values.values()):
                continue
            d1 = (values[1] - values[-1]) / (2 * h)
            d2 = (values[2] - values[-2]) / (4 * h)
            rounding = eps * float(torch.linalg.norm(values[1]) + torch.linalg.norm(values[-1]))
            bound = 10 * (float(torch.linalg.norm(d1 - d2)) + rounding / h)
            derivative = jv(v).reshape(-1)
            gap = float(torch.linalg.norm(derivative - d1))
            scale = max(float(torch.linalg.norm(derivative)), float(torch.linalg.norm(d1)))
            if gap > bound + PROBE_SLACK * scale:
                return (
                    f"the {method} reference disagrees with a float64 finite-difference probe: "
                    f"|J v - (f(x+hv) - f(x-hv)) / 2h| = {gap:.2g} where the difference's own "
                    f"error bound is {bound:.2g} (|J v| = {scale:.2g}): the derivative does not "
                    "see all of the function (a graph cut: .item(), detach, numpy, "
                    "data-dependent Python; or a wrong formula)"
                )
    return ""


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(torch.linalg.norm(b))
    diff = float(torch.linalg.norm(a - b))
    return diff / scale if scale > 0 else diff


@dataclass(frozen=True)
class Reference:
    """The Jacobian a strategy is judged against (CPU, float64, the problem's shape)."""

    jacobian: torch.Tensor
    method: str  # analytic, forward_float64 or reverse_float64
    # relative disagreement with the next exact method (``other``); None where none ran
    uncertainty: float | None
    other: str | None = None
    unstable: str = ""  # why no reference of f can be trusted (``deterministic``)
    doubt: str = ""  # why this one cannot (``fd_probe``)

    def undecided(self, tolerance: float) -> str:
        """Why no verdict at ``tolerance`` can be drawn against this reference; "" if one can."""
        methods = f"{self.method} and {self.other}"
        return undecided_reason(tolerance, self.uncertainty, methods, self.unstable, self.doubt)


def undecided_reason(
    tolerance: float, uncertainty: float | None, methods: str, unstable: str, doubt: str
) -> str:
    """The reason a reference cannot decide a verdict, most fundamental first: the function
    is not deterministic, the reference's methods disagree beyond the tolerance, or AD
    disagrees with the finite-difference probe. "" where none holds."""
    if unstable:
        return unstable
    if uncertainty is not None and uncertainty > tolerance:
        return (
            f"the reference methods disagree: {methods} differ by {uncertainty:.2g} "
            f"(relative), above the tolerance {tolerance:.2g}"
        )
    return doubt


def _methods(problem: Problem) -> dict[str, Fn]:
    f = in_float64(problem.f)
    methods = {
        REVERSE: lambda x: reverse_jacobian(f, x, problem.n_out),
        FORWARD: lambda x: forward_jacobian(f, x, problem.n_out),
    }
    if problem.analytic is not None:
        methods[ANALYTIC] = in_float64(problem.analytic)
    return methods


class References:
    """The exact float64 methods of one problem, each computed once and only when needed."""

    def __init__(self, problem: Problem) -> None:
        with Float64Mode():  # building the copy evaluates it once
            self.exact = problem.cast(torch.float64)
        self.name = problem.name
        self.methods = _methods(self.exact)
        self.jacobians: dict[str, torch.Tensor] = {}
        self.failures: dict[str, str] = {}  # method -> why it could not run
        self.doubts: dict[str, str] = {}  # method -> its checks' verdict ("" when it passed)

    def get(self, method: str) -> torch.Tensor | None:
        if method not in self.jacobians and method not in self.failures:
            if method not in self.methods:
                return None
            try:
                per_point = [self.methods[method](x) for x in self.exact.points]
                one = per_point[0] if len(per_point) == 1 else None  # no stacked copy
                value = (one if one is not None else torch.stack(per_point)).reshape(
                    self.exact.jacobian_shape
                )
                self.jacobians[method] = value.detach().to(device="cpu", dtype=torch.float64)
            except Exception as exc:
                self.failures[method] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return self.jacobians.get(method)

    def passes(self, method: str) -> int:
        """Products per point a method needs: N for forward mode, M for reverse mode."""
        return {FORWARD: self.exact.n_in, REVERSE: self.exact.n_out}.get(method, 1)

    def affordable(self, method: str) -> bool:
        """Not far costlier than the cheapest exact mode."""
        cheapest = min(self.exact.n_in, self.exact.n_out)
        return self.passes(method) <= max(PASS_LIMIT, PASS_RATIO * cheapest)

    def _first(self, methods: list[str]) -> str | None:
        return next((m for m in methods if self.get(m) is not None), None)

    def for_mode(self, mode: Mode | None) -> Reference:
        """The first affordable method of ``mode``'s preference that runs, checked against
        the cheapest other one that runs."""
        order = PREFERENCE.get(mode, DEFAULT_PREFERENCE) if mode else DEFAULT_PREFERENCE
        usable = [m for m in order if m in self.methods and self.affordable(m)]
        best = self._first(usable)
        if best is None:
            reasons = "; ".join(f"{m}: {why[:200]}" for m, why in self.failures.items())
            raise RuntimeError(
                f"the float64 reference of model {self.name!r} failed ({reasons}); make its "
                "constants tensors of the module (buffers or parameters) so that they follow "
                "the dtype, or compute them from the input"
            )
        other = self._first(sorted((m for m in usable if m != best), key=self.passes))
        jacobian = self.jacobians[best]
        spread = _rel(self.jacobians[other], jacobian) if other is not None else None
        return Reference(jacobian, best, spread, other, self.unstable, self.doubt(best))

    @functools.cached_property
    def unstable(self) -> str:
        """Whether the function gives one value at one point (its first point)."""
        return deterministic(in_float64(self.exact.f), self.exact.points[0])

    def doubt(self, method: str) -> str:
        """The finite-difference probe of ``method``'s reference at the first point, once."""
        if method not in self.doubts:
            f, x = in_float64(self.exact.f), self.exact.points[0]
            first = self.jacobians[method].reshape(-1, self.exact.n_out, self.exact.n_in)[0]
            # the reference lives on the CPU, the point on its device: J v on the CPU
            self.doubts[method] = fd_probe(
                f, x, lambda v: (first @ v.reshape(-1).cpu()).to(v), method
            )
        return self.doubts[method]


def same_values(a: Problem, b: Problem) -> bool:
    """Whether two problems hold equal points, parameters and buffers (and shapes)."""
    shapes = (a.n_in, a.n_out, a.batch, a.dtype, a.device, type(a.module))
    if shapes != (b.n_in, b.n_out, b.batch, b.dtype, b.device, type(b.module)):
        return False
    if not torch.equal(a.x, b.x):
        return False
    mine, theirs = a.module.state_dict(), b.module.state_dict()
    return mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


class LastProblem:
    """The references of the last problem this process judged, reused by the next job of the
    same key (model config, dtype, device, seed) and equal values (``same_values``)."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._problem: Problem | None = None
        self._references: References | None = None

    def references(self, key: str, problem: Problem) -> References:
        last, known = self._problem, self._references
        same = key == self._key and last is not None and same_values(last, problem)
        if same and known is not None:
            return known
        known = References(problem)
        self._key, self._problem, self._references = key, problem, known
        return known


SAMPLE = 32  # columns and rows a sampled reference computes
SAMPLED_METHOD = "sampled_float64"


@dataclass(frozen=True)
class Sample:
    """A reference for Jacobians too large to hold dense: ``SAMPLE`` random columns by forward
    mode and as many random rows by reverse mode, in float64, at the first point. The modes'
    disagreement on the entries both computed is the uncertainty."""

    cols: torch.Tensor  # (k,) column indices
    rows: torch.Tensor  # (k,) row indices
    by_cols: torch.Tensor  # (M, k): J[:, cols]
    by_rows: torch.Tensor  # (k, N): J[rows, :]
    uncertainty: float | None
    unstable: str = ""
    doubt: str = ""

    @property
    def entries(self) -> int:
        return int(self.by_cols.numel() + self.by_rows.numel())

    def undecided(self, tolerance: float) -> str:
        methods = "forward and reverse mode"
        return undecided_reason(tolerance, self.uncertainty, methods, self.unstable, self.doubt)

    def expected(self) -> torch.Tensor:
        """The sampled entries, in the order ``sampled_entries`` reads an answer."""
        return torch.cat([self.by_cols.reshape(-1), self.by_rows.reshape(-1)])


def sampled_entries(answer: Any, sample: Sample, shape: tuple[int, int]) -> torch.Tensor:
    """The first point's entries of an answer (dense, torch CSR or scipy CSR) at the sampled
    columns and rows, as float64, without densifying a sparse one."""
    import scipy.sparse  # only for sampled references of sparse answers

    cols, rows = sample.cols.numpy(), sample.rows.numpy()
    if isinstance(answer, torch.Tensor) and answer.layout == torch.strided:
        jac = answer.detach().reshape(-1, *shape)[0].to("cpu", torch.float64)
        return torch.cat([jac[:, cols].reshape(-1), jac[rows, :].reshape(-1)])
    if isinstance(answer, torch.Tensor):  # torch CSR
        parts = (answer.values(), answer.col_indices(), answer.crow_indices())
        answer = scipy.sparse.csr_array(tuple(p.detach().cpu().numpy() for p in parts), shape=shape)
    csr = scipy.sparse.csr_array(answer)
    picked = [csr[:, cols].toarray().reshape(-1), csr[rows, :].toarray().reshape(-1)]
    return torch.from_numpy(np.concatenate(picked)).to(torch.float64)


def sampled_reference(problem: Problem, k: int = SAMPLE, seed: int = 0) -> Sample:
    """``Sample`` of ``problem``'s Jacobian (one point: a batch is judged by its first)."""
    with Float64Mode():
        exact = problem.cast(torch.float64)
    f, x = in_float64(exact.f), exact.points[0]
    m, n = exact.n_out, exact.n_in
    gen = torch.Generator().manual_seed(seed)
    cols = torch.randperm(n, generator=gen)[: min(k, n)].sort().values
    rows = torch.randperm(m, generator=gen)[: min(k, m)].sort().values
    basis_in = _unit_rows(cols, n, torch.float64, x.device)
    basis_out = _unit_rows(rows, m, torch.float64, x.device)

    def jvp(v: torch.Tensor) -> torch.Tensor:
        return torch.func.jvp(f, (x,), (v.reshape(x.shape),))[1].reshape(-1)

    by_cols = torch.func.vmap(jvp)(basis_in).T  # (M, k)
    _, pullback = torch.func.vjp(lambda v: f(v).reshape(-1), x)  # type: ignore[misc]  # stub: or has_aux's triple
    by_rows = torch.func.vmap(pullback)(basis_out)[0].reshape(len(rows), n)  # (k, N)
    unstable = deterministic(f, x)
    doubt = fd_probe(f, x, jvp, SAMPLED_METHOD)
    by_cols, by_rows = by_cols.cpu(), by_rows.cpu()  # judged on the CPU (sampled_entries)
    both_a, both_b = by_cols[rows], by_rows[:, cols]
    return Sample(cols, rows, by_cols, by_rows, _rel(both_b, both_a), unstable, doubt)


def reference_jacobian(problem: Problem, mode: Mode | None = None) -> tuple[torch.Tensor, str]:
    """The reference for a strategy of ``mode`` (default: the formula, else reverse mode),
    and the method that computed it."""
    reference = References(problem).for_mode(mode)
    return reference.jacobian, reference.method
