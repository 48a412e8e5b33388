"""Judging: how far a strategy's Jacobian is from the reference, and whether that is right for
its dtype (``core.numerics.tolerance``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jacbench.core.enums import Kind
from jacbench.core.numerics import machine_eps, tolerance


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
