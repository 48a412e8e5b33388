"""The library: ``jacbench.prepare`` once, then call the prepared Jacobian at every point.

    prep = jacbench.prepare(f, x0, "auto")   # setup (for auto: calibrate, compile) once
    J = prep(x)                              # any x like x0: shape, dtype and device

``jacbench.jacobian(f, x, ...)`` is the one-shot form. ``f`` is a module or a plain function
of one tensor; Jacobians w.r.t. a module's parameters go through ``jacbench.FlatParams``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from jacbench.core.agreement import disagreement
from jacbench.core.enums import Kind
from jacbench.core.errors import UnsupportedFunction
from jacbench.core.memory_budget import check_answer_fits
from jacbench.core.modes import plain_autograd
from jacbench.core.prepared import Prepared, known_cause
from jacbench.core.probe import check_point, probe
from jacbench.core.problem import FunctionModule, make_problem
from jacbench.core.registry import load_registry


def prepare(
    f: Callable[[torch.Tensor], torch.Tensor],
    example_x: torch.Tensor,
    strategy: str = "auto",
    **options: Any,
) -> Prepared:
    """A reusable Jacobian of ``f`` for points like ``example_x``, by a registered strategy.

    ``prep(x)`` returns the Jacobian at ``x`` shaped ``f(x).shape + x.shape``, a new tensor
    at every call, never requiring grad; ``options`` are the strategy's (``eps=1e-4``,
    ``compile=False``). The module's mode and flags are left alone and every call of f gets
    a copy of its point. Sparse strategies with ``output="csr"`` (or ``"scipy"``) return the
    (M, N) CSR matrix and take a declared ``pattern=``. f is evaluated twice first
    (``jacbench.core.probe``): a function with no Jacobian to prepare is refused with one
    error naming the cause (``UnsupportedFunction``, ``RandomFunction``, ``GraphCut``); a
    dense Jacobian that cannot fit, with ``MemoryBudget``. The first answer of an exact
    strategy is checked against reverse mode (``WrongJacobian``).
    """
    if not callable(f):
        raise UnsupportedFunction(
            f"f is a {type(f).__name__}, not a function or module: pass a callable that maps "
            "a tensor to a tensor"
        )
    device = example_x.device if isinstance(example_x, torch.Tensor) else torch.device("cpu")
    with plain_autograd(device):
        x = check_point(example_x)
        name, registry = _label(f), load_registry()
        kind = registry.get(strategy).kind
        try:
            probed = probe(f, x, name, by_ad=kind is not Kind.APPROXIMATE)  # fd: values alone
        except RuntimeError as exc:
            raise (known_cause(exc) or exc) from exc
        module = f if isinstance(f, nn.Module) else FunctionModule(f)
        # every call of f gets a copy of its point: the caller's x is never written
        problem = make_problem(
            name, module, x, "input", False, vectorize=True, output=probed.output, copy_input=True
        )
        dense = options.get("output", "dense") == "dense" and strategy != "auto"
        if dense:
            check_answer_fits(problem.n_out, problem.n_in, problem.dtype, problem.device)
        try:
            flat = registry.prepare(strategy, problem, **options)
        except RuntimeError as exc:
            raise (known_cause(exc) or exc) from exc
    check = None
    if kind is Kind.EXACT:

        def check(point: torch.Tensor, jac: Any) -> str:
            return disagreement(problem.f, point, jac, problem.n_out)

    recipe = functools.partial(prepare, f, x, strategy, **options)  # pickled as this
    return replace(
        flat,
        shape=tuple(x.shape),
        out_shape=tuple(probed.output.shape),
        first_check=check,
        recipe=recipe,
    )


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
