"""A Jacobian checked against f's own directional derivatives, at the prepared point and at
random points, along several random directions.

What was not proved from the program (a declared or probed pattern, a remembered decision)
must be right where it will be used, not only at ``x0``: ``mismatch`` compares ``J V`` with
``jvp(f, x, V)`` (a ``vjp``, or central differences, where f lacks the formula) at ``x0`` and
at ``random_points`` (half around zero at x0's scale, half near ``x0``). Rows where f's own
derivative is not finite are left out; a point where f cannot be evaluated is skipped. The
generator is seeded: the same problem is checked at the same points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from jacbench.core.interrupt import raise_if_interrupt

DIRECTIONS = 3  # random directions per point
NEAR = 0.1  # relative size of the offsets of the points near x0
EPS_FACTOR = 1000.0  # relative mismatch, in rounding units of x's dtype, tolerated by default


def random_points(x: torch.Tensor, count: int, seed: int = 0) -> list[torch.Tensor]:
    """``count`` points like ``x``: even ones spread around zero at x's scale (per entry
    ``max(|x_j|, 1)``), odd ones within ``NEAR`` of ``x`` at that scale."""
    gen = torch.Generator().manual_seed(seed)
    base = x.detach().to(device="cpu", dtype=torch.float64)
    scale = base.abs().clamp(min=1.0)
    out = []
    for k in range(count):
        noise = torch.randn(base.shape, generator=gen, dtype=torch.float64) * scale
        out.append((noise if k % 2 == 0 else base + NEAR * noise).to(x))
    return out


def _times(jacobian: Any, v: torch.Tensor) -> torch.Tensor:
    """``J @ v`` for v (N, D): a dense (..., M, N) Jacobian, torch CSR or scipy CSR."""
    if not isinstance(jacobian, torch.Tensor):  # scipy: never densified
        return torch.from_numpy(jacobian @ v.detach().cpu().numpy()).to(v)
    if jacobian.layout != torch.strided:  # torch CSR
        return jacobian @ v
    return jacobian.reshape(-1, v.shape[0]) @ v


def _transposed_times(jacobian: Any, u: torch.Tensor) -> torch.Tensor:
    """``J^T @ u`` for u (M, D)."""
    if not isinstance(jacobian, torch.Tensor):
        return torch.from_numpy(jacobian.T @ u.detach().cpu().numpy()).to(u)
    if jacobian.layout != torch.strided:
        return (u.T @ jacobian).T
    return jacobian.reshape(u.shape[0], -1).T @ u


def _forward(f: Callable, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """f's JVPs along the columns of v (N, D), as the columns of an (M, D) matrix."""

    def along(t: torch.Tensor) -> torch.Tensor:
        return torch.func.jvp(f, (x,), (t.reshape(x.shape),))[1].reshape(-1)

    try:  # one batched pass; a loop where some op has no batching rule
        return torch.func.vmap(along)(v.T).T
    except (NotImplementedError, RuntimeError):
        return torch.stack([along(v[:, d]) for d in range(v.shape[1])], dim=1)


def _reverse(f: Callable, x: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(U, f's VJPs with U's columns): random U (M, D) and the (N, D) products, by plain
    reverse-mode autograd (torch.func.vjp imports torch._dynamo on its first call; no
    ``grad_outputs`` tensor either: autograd's shape check of one imports sympy)."""
    X = x.detach().requires_grad_(True)
    out = f(X)
    u = torch.randn(out.numel(), DIRECTIONS, generator=gen, dtype=torch.float64).to(out)
    exact = []
    for d in range(DIRECTIONS):
        grad = None
        if out.requires_grad:  # else f does not depend on x
            weighted = (out * u[:, d].reshape(out.shape)).sum()
            (grad,) = torch.autograd.grad(
                weighted, X, retain_graph=d < DIRECTIONS - 1, allow_unused=True
            )
        exact.append((torch.zeros_like(X) if grad is None else grad).reshape(-1))
    return u, torch.stack(exact, dim=1)


def _central(f: Callable, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Central differences along v's columns (error ~ eps^(2/3)): for an f that AD cannot
    differentiate (``unique``), whose only Jacobian is a finite difference's."""
    h = float(torch.finfo(x.dtype).eps) ** (1 / 3) * float(x.abs().max().clamp(min=1.0))
    with torch.no_grad():
        ends = [f(x + h * t.reshape(x.shape)) - f(x - h * t.reshape(x.shape)) for t in v.T]
    return torch.stack([e.reshape(-1) for e in ends], dim=1) / (2 * h)


def _products(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    jacobian: Any,
    gen: torch.Generator,
    reverse_first: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(from the Jacobian, from f): ``J V`` and f's JVPs along DIRECTIONS random V; else
    ``J^T U`` and f's VJPs where f has no forward-mode formula; else ``J V`` and central
    differences where it has no derivative formula at all. ``reverse_first``: the VJPs
    first (they import nothing of torch's compiler; forward AD imports torch._dynamo)."""
    v = torch.randn(x.numel(), DIRECTIONS, generator=gen, dtype=torch.float64).to(x)
    with torch.enable_grad():
        if reverse_first:
            try:
                u, exact = _reverse(f, x, gen)
                return _transposed_times(jacobian, u), exact
            except (NotImplementedError, RuntimeError):  # no reverse-mode formula: forward
                pass
        try:
            return _times(jacobian, v), _forward(f, x, v)
        except (NotImplementedError, RuntimeError):  # no forward-mode formula: reverse
            pass
        try:
            u, exact = _reverse(f, x, gen)
            return _transposed_times(jacobian, u), exact
        except (NotImplementedError, RuntimeError):  # no derivative formula at all
            pass
    return _times(jacobian, v), _central(f, x, v)


def gap(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    jacobian: Any,
    seed: int = 0,
    reverse_first: bool = False,
) -> float | None:
    """The relative (Frobenius) mismatch of ``jacobian``'s products with f's directional
    derivatives at ``x``, over the rows where f's are finite; None where none is."""
    gen = torch.Generator().manual_seed(seed)
    got, exact = _products(f, x, jacobian, gen, reverse_first)
    rows = torch.isfinite(exact).all(dim=1)
    if not bool(rows.all()):  # a singular point: where a derivative is infinite, AD's modes
        rows &= torch.isfinite(got).all(dim=1)  # differ by 0 * inf = NaN in other rows too
    if not bool(rows.any()):
        return None
    got, exact = got[rows].to(torch.float64), exact[rows].to(torch.float64)
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    scale = float(torch.linalg.norm(exact)) or 1.0
    return float(torch.linalg.norm(got - exact)) / scale


def mismatch(
    f: Callable[[torch.Tensor], torch.Tensor],
    jacobian_at: Callable[[torch.Tensor], Any],
    x0: torch.Tensor,
    first: Any = None,
    allowed: float | None = None,
    n_random: int = 0,
    reverse_first: bool = False,
) -> str:
    """Where the Jacobian ``jacobian_at`` gives is off f's directional derivatives by more
    than ``allowed`` (default: ``EPS_FACTOR`` rounding units), as a phrase with the gap;
    "" where it agrees at ``x0`` (``first``: its Jacobian there, if already computed) and
    at ``n_random`` random points."""
    if allowed is None:
        allowed = EPS_FACTOR * float(torch.finfo(x0.dtype).eps)
    off = gap(f, x0, jacobian_at(x0) if first is None else first, reverse_first=reverse_first)
    if off is not None and not off <= allowed:
        return f"{off:.2g} (relative) off at the prepared point"
    for k, point in enumerate(random_points(x0, n_random, seed=1)):
        try:
            with torch.no_grad():
                if not bool(torch.isfinite(f(point)).all()):
                    continue  # outside f's domain: says nothing
            off = gap(f, point, jacobian_at(point), seed=2 + k, reverse_first=reverse_first)
        except Exception as exc:  # f cannot be evaluated there (a domain error): says nothing
            raise_if_interrupt(exc)
            continue
        if off is not None and not off <= allowed:
            return f"{off:.2g} (relative) off at a random point ({k + 1} of {n_random})"
    return ""
