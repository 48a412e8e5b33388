"""Dtypes, their rounding unit, and how far a Jacobian is from the reference."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jacbench.core.errors import ConfigError
from jacbench.core.strategy import Kind

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# An exact strategy is "within tolerance" when its relative error is at most this many
# rounding units of its dtype. Rounding in a forward pass of depth d over sums of length n
# grows like a small multiple of d*sqrt(n); 100 units covers the models we ship with room.
EXACT_TOL_EPS = 100.0
# Finite differences lose about half the digits (forward) or a third (central); their
# tolerance is a multiple of sqrt(eps), capped so half precision still means something.
APPROX_TOL_SQRT_EPS = 100.0
APPROX_TOL_CAP = 0.1


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ConfigError(f"unknown dtype {name!r}; valid dtypes: {', '.join(DTYPES)}") from None


def machine_eps(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps)


def tolerance(dtype: torch.dtype, kind: Kind) -> float:
    """Relative (Frobenius) error under which a Jacobian counts as right for its dtype."""
    eps = machine_eps(dtype)
    if kind is Kind.APPROXIMATE:
        return min(APPROX_TOL_CAP, APPROX_TOL_SQRT_EPS * eps**0.5)
    return EXACT_TOL_EPS * eps


@dataclass(frozen=True)
class ErrorMetrics:
    max_abs_err: float
    rel_err: float
    err_eps: float
    within_tol: bool | None  # None: undecided (the reference cannot be trusted)
    n_nonfinite: int


def compare(
    jac: torch.Tensor,
    reference: torch.Tensor,
    dtype: torch.dtype,
    kind: Kind,
    undecided: str = "",
) -> ErrorMetrics:
    """Error of ``jac`` against the float64 ``reference``, in absolute, relative and ULP-ish
    units. Non-finite entries make the verdict false and are counted; ``undecided`` (why the
    reference cannot be trusted) leaves the verdict open, whatever the error."""
    if tuple(jac.shape) != tuple(reference.shape):
        raise ValueError(
            f"strategy returned shape {tuple(jac.shape)}, expected {tuple(reference.shape)}"
        )
    diff = jac.detach().to(device="cpu", dtype=torch.float64) - reference
    n_nonfinite = int((~torch.isfinite(diff)).sum())
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.norm(reference))
    diff_norm = float(torch.linalg.norm(diff))
    rel = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    err_eps = rel / machine_eps(dtype)
    within = n_nonfinite == 0 and rel <= tolerance(dtype, kind)
    return ErrorMetrics(max_abs, rel, err_eps, None if undecided else within, n_nonfinite)
