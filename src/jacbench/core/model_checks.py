"""Checks of what a user's model returns, made once when its Problem is built, so that a
model jacbench cannot differentiate fails with one line instead of a wrong "ok" row."""

from __future__ import annotations

from collections.abc import Callable

import torch

from jacbench.core.errors import ConfigError, one_line


def first_output(name: str, forward: Callable[[], object], dtype: torch.dtype) -> torch.Tensor:
    """The model's output at the point, checked; a dtype clash (constants that do not follow
    the job's dtype) becomes one line saying what to change."""
    with torch.no_grad():
        return check_output(name, evaluated(name, forward, dtype))


def evaluated(name: str, forward: Callable[[], object], dtype: torch.dtype) -> object:
    """``forward()``; a dtype clash (constants that do not follow the job's dtype) becomes
    one line saying what to change."""
    try:
        return forward()
    except RuntimeError as exc:
        text = one_line(exc, None)
        if "dtype" not in text and "Double" not in text and "Float" not in text:
            raise
        raise ConfigError(
            f"model {name!r} cannot compute in {str(dtype).removeprefix('torch.')} "
            f"({text[:160]}): tensors it keeps outside parameters and buffers (in a "
            "closure or a global) keep their own dtype; register them as buffers of an "
            "nn.Module, or create them with the input's dtype (x.dtype)"
        ) from exc


def check_output(name: str, out: object) -> torch.Tensor:
    """``out`` when it is a floating-point (or complex) tensor; else one clear ConfigError.

    An integer output has a zero (or no) derivative: a finite difference of it against an
    all-zero reference would be recorded as exact."""
    if not isinstance(out, torch.Tensor):
        raise ConfigError(
            f"model {name!r}: forward returns {type(out).__name__}, not a torch.Tensor; return "
            "a tensor computed from the input with torch operations (no .item(), float() or "
            ".tolist())"
        )
    if not (out.is_floating_point() or out.is_complex()):
        raise ConfigError(
            f"model {name!r}: forward returns a {out.dtype} tensor; a Jacobian needs "
            "floating-point outputs (drop the integer or bool cast, e.g. .long() or .int())"
        )
    return out


CHECKED_POINTS = 4  # as many as show a reduction or mixing across the batch


def check_batched(
    name: str,
    forward: Callable[[torch.Tensor], torch.Tensor],
    one: Callable[[torch.Tensor], torch.Tensor],
    points: torch.Tensor,
) -> None:
    """A model declaring ``accepts_batch = True`` must map K stacked inputs to K rows, each
    equal to calling it on that input alone (no reduction or mixing across the batch)."""
    points = points[:CHECKED_POINTS]  # a batch of 10^6 was checked one call per point
    probe = points if len(points) > 1 else torch.cat([points, 0.5 * points])
    k = len(probe)
    hint = "fix forward, or remove accepts_batch so that jacbench calls it point by point"
    with torch.no_grad():
        try:
            out = forward(probe)
        except Exception as exc:
            detail = one_line(exc, 200)
            raise ConfigError(
                f"model {name!r}: accepts_batch=True, but forward fails on a batch of {k} "
                f"inputs ({type(exc).__name__}: {detail}); {hint}"
            ) from exc
        check_output(name, out)
        rows = torch.stack([one(p) for p in probe])
    if out.shape[:1] != (k,) or out.numel() != rows.numel():
        raise ConfigError(
            f"model {name!r}: accepts_batch=True, but forward maps a batch of {k} inputs to "
            f"shape {tuple(out.shape)}, expected ({k}, ...) with one row per input; {hint}"
        )
    eps = torch.finfo(rows.dtype).eps if rows.is_floating_point() else 1e-7
    tol = min(0.1, 100 * eps**0.5)
    scale = float(rows.abs().max()) if rows.numel() else 0.0
    if not torch.allclose(out.reshape(rows.shape), rows, rtol=tol, atol=tol * scale):
        raise ConfigError(
            f"model {name!r}: accepts_batch=True, but forward on a batch of {k} inputs differs "
            f"from calling it on each input (it mixes the batch); {hint}"
        )
