"""A prepared Jacobian: what a strategy built once, callable at any point of one shape.

Preparation apart from execution, as DifferentiationInterface.jl's ``prepare_jacobian`` /
``jacobian``: the setup (vmap, compilation, a sparsity pattern, a calibration) is paid once,
and ``prep(x)`` reuses it at every new point of the same shape, dtype and device. What the
setup decided is a declared, typed field (``info``), never an attribute set on a function.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from jacbench.core.enums import Mode
from jacbench.core.errors import (
    NotPicklable,
    OutputMismatch,
    PointMismatch,
    UnsupportedFunction,
    WrongJacobian,
)
from jacbench.core.finite import LaterSum, finite_sum
from jacbench.core.modes import plain_autograd, usable

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
    tier: str = ""  # auto: eager, batched, folded or compiled (once the calls paid for it)
    built: str = ""  # every strategy: what its setup made, with the options it was made with


class Tiers(Protocol):
    """A Jacobian that starts eager and moves to compiled code once that pays (auto)."""

    @property
    def tier(self) -> str: ...

    @property
    def chosen_strategy(self) -> str: ...

    @property
    def refused(self) -> object | None:
        """The later tier that failed its first call's check (``jacbench.core.tiers``)."""

    @property
    def current(self) -> Prepared:
        """The form that answers now."""

    @property
    def history(self) -> list[str]:
        """The tiers reached, the first first."""

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
    # whether every call takes turns under TORCH_STATE; None: by the strategy's mode (forward
    # mode does). A traced graph uses no forward AD at its calls, only when traced again.
    serial: bool | None = None
    # the entries of an answer that can be NaN or infinite, where they are fewer than all (a
    # sparse Jacobian written into a dense matrix: its pattern's, the rest are the zeros it
    # wrote); None: every entry. Checked at each call (Prepared._finite).
    finite_entries: Callable[[Any], torch.Tensor] | None = None


def _describe(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> str:
    return f"shape {tuple(shape)}, {str(dtype).removeprefix('torch.')} on {device}"


# torch keeps some state per process, not per thread: forward-mode AD's dual levels (two
# threads in jvp at once fail with "Nested forward mode AD is not supported", or worse, leave
# a traced graph wrong for good), make_fx's patcher, and modules it imports on first use (two
# first uses at once left torch half-imported). Whatever touches it takes turns under this
# lock: every preparation, every call of a forward-mode Jacobian, and the first call of any
# other (reverse mode and differences then run concurrently).
TORCH_STATE = threading.RLock()
_NO_TURN = contextlib.nullcontext()
# A fork while another thread holds the lock would copy it held into the child, whose first
# preparation would then wait for ever: the fork waits for the lock instead (as logging's
# locks do), and the child releases the copy its forking thread holds.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=TORCH_STATE.acquire,
        after_in_parent=TORCH_STATE.release,
        after_in_child=TORCH_STATE.release,
    )


@dataclass
class _Calls:
    """Whether a prepared Jacobian has been called (its first call takes turns), whether
    its first answer was checked (against reverse mode; for finite entries), and (on a
    CUDA device) its last answer's sum on the way."""

    warm: bool = False
    checked: bool = False
    finite_once: bool = False
    later: LaterSum = field(default_factory=LaterSum)


@dataclass(frozen=True)
class Prepared:
    """``prep(x)``: the Jacobian at ``x``, by the strategy prepared for points like ``x``.

    Calls run under ``torch.no_grad()``: the result never carries a graph, and it is a new
    tensor at every call. NaN or infinite entries bring a ``NonFiniteJacobian`` warning (on
    CUDA after the first call, at a later call: the check does not wait for the device).
    Safe to call from several threads (forward-mode ones take turns: torch's forward AD is
    not usable from two threads at once). A point of another shape, dtype or device is
    refused with a message naming what was prepared and what was given.

    ``fn`` maps a flat point to the flat (M, N) Jacobian (B, M, N for a batch); the library
    (``out_shape`` set) reshapes points and Jacobians to ``f(x).shape + x.shape``.
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
    serial: bool = False  # every call takes turns under TORCH_STATE (forward mode)
    out_shape: tuple[int, ...] | None = None  # the library's: f(x).shape
    finite_entries: Callable[[Any], torch.Tensor] | None = field(default=None, repr=False)
    # the library's: the first answer checked (``jacbench.core.agreement``: "" where right)
    first_check: Callable[[torch.Tensor, Any], str] | None = field(default=None, repr=False)
    # the library's: ``jacbench.prepare`` with what it was given (a picklable partial)
    recipe: Callable[[], Prepared] | None = field(default=None, repr=False)
    calls: _Calls = field(default_factory=_Calls, repr=False, compare=False)

    @property
    def info(self) -> PrepInfo:
        """What the strategy decided; for a tiered ``auto``, what the tier it is in now
        decided (its colours, its pattern), and ``built`` describes that tier's form (the
        tiers before it named after it)."""
        if self.tiers is None:
            return self.declared_info
        tiers, current = self.tiers, self.tiers.current.info
        built = current.built or self.declared_info.built
        if len(tiers.history) > 1:
            built += f" (after tiers {' -> '.join(tiers.history[:-1])})"
        return replace(
            current,
            decided_by=self.declared_info.decided_by,
            tier=tiers.tier,
            chosen_strategy=tiers.chosen_strategy,
            built=built,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) as what it was prepared from: prepared again there."""
        if self.recipe is None:
            raise NotPicklable(
                f"this prepared {self.strategy} Jacobian was made by the benchmark, not by "
                "jacbench.prepare: prepare it again where it is needed"
            )
        return (self.recipe, ())

    def settled(self) -> Prepared:
        """This Jacobian in its final tier (a tiered ``auto`` compiles now); itself."""
        if self.tiers is not None:
            self.tiers.settle()
        return self

    def check(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise PointMismatch(
                f"{self.strategy} was prepared for points of "
                f"{_describe(self.shape, self.dtype, self.device)}; got a {type(x).__name__}: "
                "pass a torch.Tensor (torch.as_tensor(x, dtype=...) converts one)"
            )
        if tuple(x.shape) != self.shape or x.dtype != self.dtype or x.device != self.device:
            raise PointMismatch(
                f"{self.strategy} was prepared for points of "
                f"{_describe(self.shape, self.dtype, self.device)}; got "
                f"{_describe(tuple(x.shape), x.dtype, x.device)}: prepare again for this point"
            )

    def _turn(self) -> contextlib.AbstractContextManager:
        """TORCH_STATE where this call must take turns (forward mode; any first call)."""
        return TORCH_STATE if self.serial or not self.calls.warm else _NO_TURN

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """The strategy's Jacobian at a flat point, taking turns where it must."""
        with self._turn():
            out = self.fn(x)
        self.calls.warm = True
        return out

    def raw_both(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f(x), J(x)) at a flat point: from one pass where the strategy has one."""
        if self.both_fn is None:
            if self.value_fn is None:
                raise TypeError(f"{self.strategy}: prepared without f's values (value_fn)")
            return self.value_fn(x), self.raw(x)
        with self._turn():
            out = self.both_fn(x)
        self.calls.warm = True
        return out

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        with plain_autograd(self.device), torch.no_grad():
            flat = usable(x if self.out_shape is None else x.reshape(-1))
            try:
                with self._turn():  # as in raw, inline: one layer less between x and f
                    out = self.fn(flat)
            except RuntimeError as exc:
                raise self._explained(flat, exc) from exc
            self.calls.warm = True
            self._checked_first(flat, out)
        return self._finite(self._shaped(flat, out))

    def _checked_first(self, flat: torch.Tensor, out: Any) -> None:
        """The library's first answer, checked against reverse mode along a random
        direction: a wrong one raises ``WrongJacobian`` naming the strategy."""
        if self.first_check is None or self.calls.checked:
            return
        wrong = self.first_check(flat, out)
        if wrong:
            raise WrongJacobian(
                f"{self.strategy}: its Jacobian at this point is wrong: {wrong} (torch's "
                "forward-mode AD is wrong for some operators, e.g. scatter_reduce 'prod'); "
                "use a reverse-mode strategy: prepare(f, x, 'jacrev')"
            )
        self.calls.checked = True

    def _shaped(self, flat: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The library's Jacobian shaped ``f(x).shape + x.shape`` (a sparse matrix stays
        (M, N)); the strategy's own otherwise."""
        if self.out_shape is None or not isinstance(out, torch.Tensor):
            return out
        if out.layout != torch.strided:
            return out
        shape = self.out_shape + self.shape
        if out.numel() != math.prod(shape):
            raise self._explained(flat, None)
        return out.reshape(shape)

    def _explained(self, flat: torch.Tensor, exc: Exception | None) -> Exception:
        """An ``OutputMismatch`` where f's output at this point is not of the prepared shape
        (the strategy's error names a reshape, not the cause); an ``UnsupportedFunction``
        where torch's error has a known cause; else ``exc`` as it was."""
        known = known_cause(exc)
        if known is not None:
            return known
        if self.out_shape is not None and self.value_fn is not None:
            try:
                with torch.no_grad():
                    got = tuple(self.value_fn(flat).shape)
            except Exception:
                got = None
            if got is not None and math.prod(got) != math.prod(self.out_shape):
                return OutputMismatch(
                    f"f returned shape {got} at this point and {self.out_shape} at the point "
                    f"{self.strategy} was prepared at: a Jacobian has one shape for all points "
                    "of a prepared function; prepare again at this point, or return an output "
                    "of fixed size (e.g. torch.where instead of boolean indexing)"
                )
        return exc if exc is not None else RuntimeError(f"{self.strategy}: wrong Jacobian size")

    def _finite(self, out: torch.Tensor) -> torch.Tensor:
        """``out``, with a ``NonFiniteJacobian`` warning where it has NaN or inf entries."""
        layout = getattr(out, "layout", torch.strided)
        if self.finite_entries is not None and layout == torch.strided:
            values = self.finite_entries(out)  # a sparse pattern's entries, not all of it
        else:
            values = out.values() if layout == torch.sparse_csr else out
        if not isinstance(values, torch.Tensor):
            return out
        if values.device.type == "cuda" and self.calls.finite_once:  # no waiting
            if self.calls.later.arrived_not_finite():
                warnings.warn(
                    f"{self.strategy}: a Jacobian it returned at an earlier point had NaN or "
                    "infinite entries (on a CUDA device the check does not wait for the "
                    "device; it reports at a later call)",
                    NonFiniteJacobian,
                    stacklevel=3,
                )
            self.calls.later.queue(values)
            return out
        self.calls.finite_once = True
        if finite_sum(values) or bool(torch.isfinite(values).all()):  # or the sum overflowed
            return out
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
        with plain_autograd(self.device), torch.no_grad():
            flat = usable(x if self.out_shape is None else x.reshape(-1))
            try:
                value, jac = self.raw_both(flat)
            except RuntimeError as exc:
                raise self._explained(flat, exc) from exc
            self._checked_first(flat, jac)
        if value.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            value = value.clone()  # f returned (a view of) its input: not the caller's x
        if self.out_shape is not None:
            value = value.reshape(self.out_shape)
        return value, self._finite(self._shaped(flat, jac))


# torch's words for an error whose cause is the caller's f, and what to say instead
_CAUSES = (
    (
        "Inference tensors",
        "f uses tensors made under torch.inference_mode() (a module built or loaded there?): "
        "autograd cannot differentiate through them; make them outside it, or clone them "
        "(module.to_empty / p.data = p.clone() under torch.inference_mode(False))",
    ),
    (
        "called random operation while in randomness error mode",
        "f draws random numbers (from a generator seeded inside f too), which torch.func's "
        "vmap refuses: use a strategy of plain autograd (prepare(f, x, 'autograd_loop') or "
        "'double_backward'), or draw the numbers outside f and pass them in",
    ),
    (
        "mutate a captured Tensor",
        "f writes into a tensor it captured (e.g. BatchNorm's running statistics in train "
        "mode), which torch.func's transforms cannot differentiate: call model.eval(), or "
        "use a strategy of plain autograd (prepare(f, x, 'autograd_loop'))",
    ),
)


_NO_FORWARD_AD = re.compile(r"forward AD with (\S+) that does not support it")
_NO_DERIVATIVE = re.compile(r"the derivative for '?([\w.]+)'? is not implemented")


def known_cause(exc: Exception | None) -> UnsupportedFunction | None:
    """The error to raise instead of torch's ``exc`` where its cause is known; else None."""
    text = str(exc) if exc is not None else ""
    missing = _NO_FORWARD_AD.search(text)
    if missing:
        return UnsupportedFunction(
            f"torch has no forward-mode derivative of {missing.group(1)}, which f uses: use a "
            "reverse-mode strategy (jacrev, sparse_jacrev, the default auto) where it has a "
            "reverse-mode one, else finite differences (fd_central, sparse_fd)"
        )
    missing = _NO_DERIVATIVE.search(text)
    if missing:
        return UnsupportedFunction(
            f"torch has no derivative of {missing.group(1)}, which f uses: no AD strategy "
            "can differentiate f; use finite differences (fd_central, sparse_fd)"
        )
    for words, why in _CAUSES:
        if words in text:
            return UnsupportedFunction(why)
    return None


class NonFiniteJacobian(RuntimeWarning):
    """A prepared Jacobian returned NaN or infinite entries."""
