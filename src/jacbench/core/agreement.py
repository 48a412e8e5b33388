"""A cheap check of a Jacobian computed by one route against another route at one point.

A full second Jacobian would double the cost of the call it checks; one Jacobian-vector
product along a random direction, by forward mode through f itself, costs about two
evaluations of f and catches a Jacobian that is wrong anywhere but in a set of directions of
measure zero. Used where a new form of a Jacobian is trusted for the first time: auto's first
call in a new tier (``jacbench.core.tiers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from jacbench.core.prepared import TORCH_STATE

ROUNDING_UNITS = 1e3  # disagreement tolerated, in rounding units of |J| |v|


def _product(jacobian: Any, v: torch.Tensor, n_out: int) -> torch.Tensor:
    """J v for each point: a dense (..., M, N) tensor, a torch CSR matrix or a scipy one."""
    if isinstance(jacobian, torch.Tensor) and jacobian.layout == torch.strided:
        dense = jacobian.reshape(-1, n_out, v.shape[-1]).to(torch.float64)
        return torch.einsum("bmn,bn->bm", dense, v.reshape(-1, v.shape[-1]).to(torch.float64))
    if isinstance(jacobian, torch.Tensor):  # torch CSR: one point
        return (jacobian.to(torch.float64) @ v.reshape(-1, 1).to(torch.float64)).reshape(1, -1)
    product = jacobian @ v.reshape(-1).to(torch.float64).cpu().numpy()  # scipy CSR
    return torch.as_tensor(product, dtype=torch.float64).reshape(1, -1)


def _magnitude(jacobian: Any, v: torch.Tensor, n_out: int) -> torch.Tensor:
    """|J| |v|: the scale that rounding errors of J v are relative to."""
    if isinstance(jacobian, torch.Tensor) and jacobian.layout == torch.strided:
        return _product(jacobian.abs(), v.abs(), n_out)
    if isinstance(jacobian, torch.Tensor):
        return _product(torch.abs(jacobian), v.abs(), n_out)
    return _product(abs(jacobian), v.abs(), n_out)


def disagreement(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, jacobian: Any, n_out: int
) -> str:
    """Empty when ``jacobian`` (of ``f`` at ``x``: (M, N), or (B, M, N) for a batch of points
    with ``f`` mapping (B, N) to (B, M)) times a random direction matches forward mode's
    derivative of ``f`` along it within ``ROUNDING_UNITS`` rounding units; else how far."""
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    v = v.to(dtype=x.dtype, device=x.device)
    with TORCH_STATE, torch.no_grad():
        expected = torch.func.jvp(f, (x,), (v,))[1].reshape(-1, n_out).to(torch.float64)
    got = _product(jacobian, v, n_out).to(expected.device)
    if not bool(torch.isfinite(got).all()) and bool(torch.isfinite(expected).all()):
        return "its Jacobian has NaN or infinite entries where forward mode's J v does not"
    scale = _magnitude(jacobian, v, n_out).to(expected.device) + expected.abs()
    eps = torch.finfo(x.dtype).eps
    excess = ((got - expected).abs() - ROUNDING_UNITS * eps * scale).nan_to_num(0.0)
    if float(excess.max()) <= 0:
        return ""
    gap = float((got - expected).norm() / max(float(expected.norm()), float(eps)))
    return f"J v differs from forward mode's derivative along v by {gap:.2g} (relative)"
