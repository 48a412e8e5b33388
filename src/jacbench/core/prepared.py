"""A prepared Jacobian: what a strategy built once, callable at any point of one shape.

Preparation apart from execution, as DifferentiationInterface.jl's ``prepare_jacobian`` /
``jacobian``: the setup (vmap, compilation, a sparsity pattern, a calibration) is paid once,
and ``prep(x)`` reuses it at every new point of the same shape, dtype and device. What the
setup decided is a declared, typed field (``info``), never an attribute set on a function.
"""

from __future__ import annotations

import cmath
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from jacbench.core.enums import Mode
from jacbench.core.errors import PointMismatch

JacobianFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class PrepInfo:
    """What a strategy decided while preparing. Each field is also a ``Result`` column."""

    chosen_strategy: str = ""  # what `auto` picked
    n_colors: int | None = None  # sparse strategies: passes per Jacobian (colours)
    pattern_density: float | None = None  # sparse strategies: nonzeros / (M * N)
    colors_lower_bound: int | None = None  # sparse: no colouring has fewer colours than this
    pattern_source: str = ""  # sparse: declared, traced, probed, or dense (and why)
    decided_by: str = ""  # auto: calibrated, remembered (from an earlier process) or rule
    tier: str = ""  # auto: eager, or compiled (reached at once, or once the calls paid for it)


class Tiers(Protocol):
    """A Jacobian that starts eager and moves to compiled code once that pays (auto)."""

    @property
    def tier(self) -> str: ...

    @property
    def chosen_strategy(self) -> str: ...

    def settle(self) -> None:
        """Move to the final tier now (the runner times that, not the way to it)."""


ValueAndJacobianFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Declared:
    """What a strategy returns when it has decided something worth recording, or can give
    f(x) with the Jacobian from the same pass (``value_and_jac``)."""

    jac: JacobianFn
    info: PrepInfo = field(default_factory=PrepInfo)
    value_and_jac: ValueAndJacobianFn | None = None
    mode: Mode | None = None  # the mode the Jacobian is computed in (auto: its choice's)
    tiers: Tiers | None = None  # auto: the tier it is in, and how to reach the last now


def _describe(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> str:
    return f"shape {tuple(shape)}, {str(dtype).removeprefix('torch.')} on {device}"


@dataclass(frozen=True)
class Prepared:
    """``prep(x)``: the Jacobian at ``x``, by the strategy prepared for points like ``x``.

    Calls run under ``torch.no_grad()``: the result never carries a graph (strategies that
    need autograd enable it inside). A Jacobian with NaN or infinite entries comes with a
    ``NonFiniteJacobian`` warning. Safe to call from several threads (forward-mode ones take
    turns: torch's forward AD is not usable from two threads at once). A point of another
    shape, dtype or device is refused with a message naming what was prepared and what was
    given.
    """

    fn: JacobianFn = field(repr=False)
    strategy: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    declared_info: PrepInfo = field(default_factory=PrepInfo)
    mode: Mode | None = None  # how the Jacobian is computed (auto: by what it chose)
    tiers: Tiers | None = field(default=None, repr=False)
    value_fn: JacobianFn | None = field(default=None, repr=False)  # f at points like x
    both_fn: ValueAndJacobianFn | None = field(default=None, repr=False)  # one pass

    @property
    def info(self) -> PrepInfo:
        """What the strategy decided; for a tiered ``auto``, the tier it is in now."""
        if self.tiers is None:
            return self.declared_info
        tiers = self.tiers
        return replace(self.declared_info, tier=tiers.tier, chosen_strategy=tiers.chosen_strategy)

    def settled(self) -> Prepared:
        """This Jacobian in its final tier (a tiered ``auto`` compiles now); itself."""
        if self.tiers is not None:
            self.tiers.settle()
        return self

    def check(self, x: torch.Tensor) -> None:
        if tuple(x.shape) != self.shape or x.dtype != self.dtype or x.device != self.device:
            raise PointMismatch(
                f"{self.strategy} was prepared for points of "
                f"{_describe(self.shape, self.dtype, self.device)}; got "
                f"{_describe(tuple(x.shape), x.dtype, x.device)}: prepare again for this point"
            )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        with torch.no_grad():
            out = self.fn(x)
        return self._finite(out)

    def _finite(self, out: torch.Tensor) -> torch.Tensor:
        """``out``, with a ``NonFiniteJacobian`` warning where it has NaN or inf entries."""
        values = out.values() if getattr(out, "layout", torch.strided) == torch.sparse_csr else out
        # NaN and inf reach the sum (15 us on seed004, isfinite().all() 126), and the sum is
        # read as a Python number: torch.isfinite of it costs ~30 us more (several kernels)
        if not isinstance(values, torch.Tensor) or cmath.isfinite(values.sum().item()):
            return out
        if not bool(torch.isfinite(values).all()):  # not a sum that overflowed
            bad = int((~torch.isfinite(values)).sum())
            warnings.warn(
                f"{self.strategy}: the Jacobian has {bad} NaN or infinite entries of "
                f"{values.numel()} at this point (f or its derivative is not finite here)",
                NonFiniteJacobian,
                stacklevel=3,
            )
        return out

    @property
    def one_pass(self) -> bool:
        """Whether ``value_and_jacobian`` gets f(x) from the Jacobian's own pass."""
        return self.both_fn is not None

    def value_and_jacobian(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f(x), J(x))``, as DifferentiationInterface.jl's ``value_and_jacobian``: from
        one pass where the strategy computes f(x) anyway (forward and reverse mode), else
        f(x) evaluated beside the Jacobian. A Levenberg-Marquardt step needs both. The
        Jacobian is checked for NaN and inf entries as ``prep(x)`` checks it."""
        if self.both_fn is None and self.value_fn is None:
            raise TypeError(f"{self.strategy}: prepared without its function")
        self.check(x)
        with torch.no_grad():
            if self.both_fn is not None:
                value, jac = self.both_fn(x)
            else:
                value, jac = self.value_fn(x), self.fn(x)
        return value, self._finite(jac)


class NonFiniteJacobian(RuntimeWarning):
    """A prepared Jacobian returned NaN or infinite entries."""
