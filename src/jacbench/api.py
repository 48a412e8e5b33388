"""``jacbench.jacobian(f, x, strategy="auto")``: any registered strategy on your own code."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from jacbench.problem import make_problem
from jacbench.registry import load_registry


class _Opaque(nn.Module):
    """Holds the user's function without adopting its parameters: jacbench must not switch
    the user's module to eval mode or change its parameters' requires_grad for good."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.__dict__["fn"] = fn  # not registered as a submodule on purpose

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@contextlib.contextmanager
def _frozen(fn: Any) -> Iterator[None]:
    """Parameters of ``fn`` (if a module) do not require grad for the duration, so the
    Jacobian w.r.t. x keeps no graph to them; their flags are restored afterwards."""
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    flags = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in zip(params, flags, strict=True):
            p.requires_grad_(flag)


def jacobian(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    strategy: str = "auto",
    **options: Any,
) -> torch.Tensor:
    """The Jacobian of ``f`` at ``x`` by a registered strategy, shaped f(x).shape + x.shape
    (as torch.func.jacrev returns it). ``options`` are the strategy's options, e.g.
    ``jacobian(f, x, "fd_central", eps=1e-4)`` or ``jacobian(f, x, "auto", compile=False)``.

    Each call prepares the strategy anew (for ``auto``: choosing and, with compile on,
    compiling; torch.compile caches what it compiled). The result never requires grad.
    """
    spec = load_registry().get(strategy)
    opts = spec.make_options(options)
    with _frozen(f), torch.no_grad():
        out_shape = tuple(f(x).shape)
    with _frozen(f):
        problem = make_problem("user_function", _Opaque(f), x.detach(), "input", False)
        jac = spec.prepare(problem, opts)()
    return jac.detach().reshape(*out_shape, *x.shape)
