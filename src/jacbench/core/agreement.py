"""A cheap check of a Jacobian against f's own derivative at one point.

One vector-Jacobian product along a random direction u, by plain reverse-mode autograd
through f, costs about two evaluations of f and catches a Jacobian wrong anywhere but in a
set of directions of measure zero. It checks each new tier of auto and the library's first
answer of every exact strategy. Plain reverse mode: it imports nothing of torch's compiler,
takes no turn (forward AD is process-wide) and is right where torch's forward AD is not;
forward mode checks where f has no reverse-mode derivative.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.prepared import TORCH_STATE

ROUNDING_UNITS = 1e3  # disagreement tolerated, in rounding units of |u| |J| (or |J| |v|)


def _product(jacobian: Any, v: torch.Tensor, n_out: int) -> torch.Tensor:
    """J v for each point: a dense (..., M, N) tensor, a torch CSR matrix or a scipy one."""
    if isinstance(jacobian, torch.Tensor) and jacobian.layout == torch.strided:
        dense = jacobian.reshape(-1, n_out, v.shape[-1]).to(torch.float64)
        return torch.einsum("bmn,bn->bm", dense, v.reshape(-1, v.shape[-1]).to(torch.float64))
    if isinstance(jacobian, torch.Tensor):  # torch CSR: one point
        jacobian = _scipy_csr(jacobian)
    product = jacobian @ v.reshape(-1).to(torch.float64).cpu().numpy()  # scipy CSR
    return torch.as_tensor(product, dtype=torch.float64).reshape(1, -1)


def _transposed(jacobian: Any, u: torch.Tensor, n_in: int) -> torch.Tensor:
    """u^T J for each point (u: (B, M))."""
    u = u.to(torch.float64)
    if isinstance(jacobian, torch.Tensor) and jacobian.layout == torch.strided:
        dense = jacobian.reshape(u.shape[0], u.shape[1], n_in).to(torch.float64)
        return torch.einsum("bm,bmn->bn", u, dense)
    if isinstance(jacobian, torch.Tensor):  # torch CSR, one point: scipy's product is
        jacobian = _scipy_csr(jacobian)  # several times faster than torch's on the CPU
    product = jacobian.T @ u.reshape(-1).cpu().numpy()  # scipy CSR
    return torch.as_tensor(product, dtype=torch.float64).reshape(1, -1)


def _scipy_csr(jacobian: torch.Tensor) -> Any:
    """A torch CSR matrix as scipy's (float64, on the CPU), sharing what it can."""
    import scipy.sparse

    parts = (jacobian.values(), jacobian.col_indices(), jacobian.crow_indices())
    values, columns, rows = (t.detach().cpu().numpy() for t in parts)
    return scipy.sparse.csr_array((values.astype("float64"), columns, rows), jacobian.shape)


def _absolute(jacobian: Any) -> Any:
    if isinstance(jacobian, torch.Tensor):
        return torch.abs(jacobian)
    return abs(jacobian)


def disagreement(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, jacobian: Any, n_out: int
) -> str:
    """Empty when ``jacobian`` (of ``f`` at ``x``: (M, N), or (B, M, N) for a batch of points
    with ``f`` mapping (B, N) to (B, M)) matches f's own derivative along a random direction
    within ``ROUNDING_UNITS`` rounding units: u^T J against reverse mode's gradient of
    u . f(x) (forward mode's J v where f has no reverse-mode derivative); else how far."""
    gen = torch.Generator().manual_seed(0)
    n_in = x.shape[-1]
    try:
        with torch.enable_grad():
            X = x.detach().requires_grad_(True)
            Y = f(X).reshape(-1, n_out)
            u = torch.randn(Y.shape, generator=gen, dtype=torch.float64).to(Y)
            (grad,) = torch.autograd.grad((Y * u).sum(), X, allow_unused=True)
        expected = (torch.zeros_like(X) if grad is None else grad).reshape(-1, n_in)
        got = _transposed(jacobian, u, n_in)
        scale = _transposed(_absolute(jacobian), u.abs(), n_in)
    except Exception as exc:  # no reverse-mode derivative of f (a forward-only Function)
        raise_if_interrupt(exc)
        return _forward_disagreement(f, x, jacobian, n_out)
    return _compared(got, expected.to(torch.float64), scale, x.dtype, "u^T J", "reverse")


def _forward_disagreement(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, jacobian: Any, n_out: int
) -> str:
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    v = v.to(dtype=x.dtype, device=x.device)
    with TORCH_STATE, torch.no_grad():
        expected = torch.func.jvp(f, (x,), (v,))[1].reshape(-1, n_out).to(torch.float64)
    got = _product(jacobian, v, n_out).to(expected.device)
    scale = _product(_absolute(jacobian), v.abs(), n_out).to(expected.device)
    return _compared(got, expected, scale, x.dtype, "J v", "forward")


def _compared(
    got: torch.Tensor,
    expected: torch.Tensor,
    scale: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    mode: str,
) -> str:
    """ "" where ``got`` matches ``expected`` within rounding of their scale, else how far."""
    expected = expected.to(got.device)
    if not bool(torch.isfinite(got).all()) and bool(torch.isfinite(expected).all()):
        return "its Jacobian has NaN or infinite entries where f's own derivative has none"
    eps = torch.finfo(dtype).eps
    # an entry found by cancellation (a difference of terms far larger than itself) carries
    # the rounding of its terms, not of itself: each point's RMS entry is a floor
    floor = expected.norm(dim=-1, keepdim=True) / max(expected.shape[-1], 1) ** 0.5
    tolerance = ROUNDING_UNITS * eps * (scale.to(got.device) + expected.abs() + floor)
    excess = ((got - expected).abs() - tolerance).nan_to_num(0.0)
    if float(excess.max()) <= 0:
        return ""
    gap = float((got - expected).norm() / max(float(expected.norm()), float(eps)))
    return f"{what} differs from {mode} mode's derivative along a random direction by {gap:.2g}"
