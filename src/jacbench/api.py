"""The library: ``jacbench.prepare`` once, then call the prepared Jacobian at every point.

    prep = jacbench.prepare(f, x0, "auto")   # setup (for auto: calibrate, compile) once
    J = prep(x)                              # any x like x0: shape, dtype and device

``jacbench.jacobian(f, x, ...)`` is the one-shot form. ``f`` is a module or a plain function
of one tensor; Jacobians w.r.t. a module's parameters go through ``jacbench.FlatParams``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from jacbench.core.prepared import Prepared
from jacbench.core.problem import FunctionModule, make_problem
from jacbench.core.registry import load_registry


def prepare(
    f: Callable[[torch.Tensor], torch.Tensor],
    example_x: torch.Tensor,
    strategy: str = "auto",
    **options: Any,
) -> Prepared:
    """A reusable Jacobian of ``f`` for points like ``example_x``, by a registered strategy.

    ``prep(x)`` returns the Jacobian at ``x`` shaped ``f(x).shape + x.shape`` (as
    torch.func.jacrev does), never requiring grad. ``options`` are the strategy's options,
    e.g. ``prepare(f, x, "fd_central", eps=1e-4)`` or ``prepare(f, x, "auto", compile=False)``.
    The user's module is used as it is: its mode and requires_grad flags are left alone.
    Sparse strategies with ``output="csr"`` (or ``"scipy"``) return the (M, N) CSR matrix of the
    flattened function instead (torch's, or a ``scipy.sparse.csr_array``), and take a declared
    ``pattern=``: an (M, N) boolean matrix or index pairs ``(rows, cols)``.
    """
    x = example_x.detach().clone()  # a copy: a function that mutates its input cannot reach
    with torch.no_grad():  # the caller's tensor
        out_shape = tuple(f(x.clone()).shape)
    module = f if isinstance(f, nn.Module) else FunctionModule(f)
    problem = make_problem(_label(f), module, x, "input", False, vectorize=True)
    flat = load_registry().prepare(strategy, problem, **options)
    in_shape = tuple(x.shape)

    def shaped(out: torch.Tensor) -> torch.Tensor:
        if not isinstance(out, torch.Tensor) or out.layout != torch.strided:
            return out  # a sparse matrix (output="csr" or "scipy") stays (M, N)
        return out.reshape(*out_shape, *in_shape)

    def jac(point: torch.Tensor) -> torch.Tensor:
        return shaped(flat.fn(point.reshape(-1)))

    def value(point: torch.Tensor) -> torch.Tensor:
        return flat.value_fn(point.reshape(-1)).reshape(out_shape)

    def both(point: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v, j = flat.both_fn(point.reshape(-1))
        return v.reshape(out_shape), shaped(j)

    one_pass = both if flat.both_fn is not None else None
    return replace(flat, fn=jac, shape=in_shape, value_fn=value, both_fn=one_pass)


def jacobian(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    strategy: str = "auto",
    **options: Any,
) -> torch.Tensor:
    """The Jacobian of ``f`` at ``x``, prepared and computed once. In a loop over points,
    ``prepare`` once and call the result instead: the setup is then paid once."""
    return prepare(f, x, strategy, **options)(x.detach())


def _label(f: Any) -> str:
    return getattr(f, "__name__", None) or type(f).__name__
