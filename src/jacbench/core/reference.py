"""The reference Jacobian a strategy is judged against, and how far the reference itself can be
trusted.

Every exact float64 method that applies is computed: reverse mode, forward mode and the
model's analytic formula where it has one. The reference for a strategy is one that does not
share its mode (forward mode for reverse strategies, reverse for forward ones, the formula
where there is one), so a strategy is never scored against a computation of its own kind.
The largest disagreement among the methods is the reference's own uncertainty: an error
below it cannot be resolved. All of it runs in float64, on CPU, never timed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from jacbench.core.enums import Mode

if TYPE_CHECKING:
    from jacbench.core.problem import Problem

Fn = Callable[[torch.Tensor], torch.Tensor]
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


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value if value.dtype == torch.float64 else value.double()
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    return value


class Float64Mode(TorchFunctionMode):
    """Every floating tensor (and floating dtype) a torch function receives becomes float64.

    Casting the module moves its parameters and buffers, but not constants a plain function
    keeps in a closure or a global: without this, ``w @ x`` fails with mixed dtypes (or,
    worse, silently keeps float32 rounding in the reference)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map(_up, (args, kwargs or {}))
        return func(*args, **kwargs)


def in_float64(f: Fn) -> Fn:
    def f64(v: torch.Tensor) -> torch.Tensor:
        with Float64Mode():
            return f(v)

    return f64


def _chunk(n_in: int, n_out: int) -> int:
    return max(1, CHUNK_NUMBERS // max(1, n_in + n_out))


def reverse_jacobian(f: Fn, x: torch.Tensor, n_out: int) -> torch.Tensor:
    """M vector-Jacobian products, in chunks; a row loop where vmap has no rule."""
    try:
        return torch.func.jacrev(f, chunk_size=_chunk(x.numel(), n_out))(x)
    except Exception:
        return _row_loop(f, x, n_out)


def _row_loop(f: Fn, x: torch.Tensor, n_out: int) -> torch.Tensor:
    """One vector-Jacobian product per output, each written into one preallocated matrix:
    memory stays the Jacobian's size (``autograd.functional.jacobian`` keeps every row and
    then a stacked copy)."""
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
    """N Jacobian-vector products, in chunks of basis vectors written into one preallocated
    matrix; a loop where vmap has no rule."""
    n = x.numel()

    def jvp(v: torch.Tensor) -> torch.Tensor:
        return torch.func.jvp(f, (x,), (v,))[1].reshape(-1)

    def basis(start: int, stop: int) -> torch.Tensor:  # rows start..stop of the identity
        rows = torch.zeros(stop - start, n, dtype=x.dtype, device=x.device)
        rows[torch.arange(stop - start), torch.arange(start, stop)] = 1
        return rows

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


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(torch.linalg.norm(b))
    diff = float(torch.linalg.norm(a - b))
    return diff / scale if scale > 0 else diff


@dataclass(frozen=True)
class Reference:
    """The Jacobian a strategy is judged against (CPU, float64, the problem's shape)."""

    jacobian: torch.Tensor
    method: str  # analytic, forward_float64 or reverse_float64
    # Relative (Frobenius) disagreement with the next independent exact method; None where
    # only one method could run. Errors below it are beyond what the reference resolves.
    uncertainty: float | None


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
    """The exact float64 methods of one problem, each computed once and only when needed: a
    float64 copy of the model, evaluated with all floating constants in float64, at the same
    rounded point."""

    def __init__(self, problem: Problem) -> None:
        with Float64Mode():  # building the copy evaluates it once
            self.exact = problem.cast(torch.float64)
        self.name = problem.name
        self.methods = _methods(self.exact)
        self.jacobians: dict[str, torch.Tensor] = {}
        self.failures: dict[str, str] = {}  # method -> why it could not run

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
        """Not far costlier than the cheapest exact mode (forward mode of a 1e5-parameter
        model with a few outputs would take 1e5 passes)."""
        cheapest = min(self.exact.n_in, self.exact.n_out)
        return self.passes(method) <= max(PASS_LIMIT, PASS_RATIO * cheapest)

    def _first(self, methods: list[str]) -> str | None:
        return next((m for m in methods if self.get(m) is not None), None)

    def for_mode(self, mode: Mode | None) -> Reference:
        """The reference for a strategy of ``mode``: the first affordable method of its
        preference that runs (its own mode comes last), checked against the cheapest other
        one that runs."""
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
        return Reference(jacobian, best, spread)


def reference_jacobian(problem: Problem, mode: Mode | None = None) -> tuple[torch.Tensor, str]:
    """The reference for a strategy of ``mode`` (default: the formula, else reverse mode),
    and the method that computed it."""
    reference = References(problem).for_mode(mode)
    return reference.jacobian, reference.method
