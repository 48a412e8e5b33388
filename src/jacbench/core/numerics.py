"""Dtypes, their rounding unit, and the error under which a Jacobian counts as right."""

from __future__ import annotations

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
