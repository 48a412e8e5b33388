"""A Problem: the function to differentiate and the point(s), in one dtype on one device.

Strategies see a flat view: ``f`` maps a 1-D tensor of N values to a 1-D tensor of M values,
and the Jacobian has shape (M, N). With ``batch`` B > 1 there are B independent points, x
has shape (B, N) and the per-sample Jacobians have shape (B, M, N). How that view is made
from a model (w.r.t. its input or its parameters) is decided here, once.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from jacbench.core.errors import ConfigError
from jacbench.core.model_checks import check_batched, first_output
from jacbench.core.params import FlatParams

if TYPE_CHECKING:
    from jacbench.core.local_blocks import Blocks
    from jacbench.core.sparsity import Pattern

WRT_CHOICES = ("input", "params")
Fn = Callable[[torch.Tensor], torch.Tensor]


class FunctionModule(nn.Module):
    """Lets a plain callable stand where a module is expected."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@dataclass(frozen=True)
class Problem:
    """f: R^N -> R^M at x (or at each row of x when batch > 1), plus what judges an answer."""

    name: str
    wrt: str
    f: Fn  # one point: (N,) -> (M,)
    x: torch.Tensor  # (N,), or (B, N) when batch > 1
    n_in: int
    n_out: int
    # Many points: (K, N) -> (K, M); one batched pass where the model accepts a batch or
    # vmap can batch it (``batched_natively``), else a loop.
    f_many: Fn
    # The model's own formula for the Jacobian at one point, where it has one.
    analytic: Fn | None
    module: nn.Module = field(repr=False)
    input: torch.Tensor = field(repr=False)  # the model's input, in its own shape
    batch: int = 1
    # The model's declared Jacobian sparsity pattern of one point, (M, N) sparse or dense,
    # where it has one (``jacobian_sparsity()``, w.r.t. the input only), or a Pattern already
    # made (auto's traced one): what ``sparsity.from_pairs`` reads.
    sparsity: Callable[[], torch.Tensor | Pattern] | None = field(default=None, repr=False)
    # The model's local blocks (``jacobian_blocks()``, w.r.t. the input only), where it
    # declares them: what ``blocks_jacrev`` and ``blocks_jacfwd`` read.
    blocks: Callable[[], Blocks] | None = field(default=None, repr=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def batched_natively(self) -> bool:
        """Whether many points go through one batched pass (not a loop of one per point)."""
        return bool(getattr(self.f_many, "batched", False))

    @property
    def points(self) -> torch.Tensor:
        """x as a (B, N) matrix, also when batch == 1."""
        return self.x.reshape(self.batch, self.n_in)

    @property
    def jacobian_shape(self) -> tuple[int, ...]:
        core = (self.n_out, self.n_in)
        return core if self.batch == 1 else (self.batch, *core)

    def cast(self, dtype: torch.dtype) -> Problem:
        """The same function at the same (already rounded) point, computed in ``dtype``.

        Used for the float64 reference and by strategies that need another dtype (complex
        step). Parameters are copied, never shared.
        """
        with warnings.catch_warnings():  # complex parameters warn "new feature"
            warnings.simplefilter("ignore", UserWarning)
            module = copy.deepcopy(self.module).to(dtype=dtype)
        return make_problem(
            self.name,
            module,
            self.input.to(dtype),
            self.wrt,
            self.analytic is not None,
            self.batch,
        )


class Batched:
    """Many points in one pass of a function that takes a batch."""

    batched = True

    def __init__(self, many: Fn) -> None:
        self.many = many

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        return self.many(points)


class Loop:
    """Many points, one call of f per point."""

    batched = False

    def __init__(self, f: Fn) -> None:
        self.f = f

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.f(p) for p in points])


class VmapOrLoop:
    """Many points through torch.func.vmap; a loop where some op has no batching rule, or
    where the batched values differ from one call per point (Python-side state). Decided
    at the first call (a strategy that never evaluates many points never pays the check)."""

    def __init__(self, f: Fn) -> None:
        self.f = f
        self._chosen: Fn | None = None

    @property
    def batched(self) -> bool:
        return self._chosen is not None and not isinstance(self._chosen, Loop)

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        if self._chosen is None:
            self._chosen = self.choose(points[0])
        return self._chosen(points)

    def choose(self, x: torch.Tensor) -> Fn:
        many, loop = torch.func.vmap(self.f), Loop(self.f)
        probe = torch.stack([x, 0.5 * x + 0.25])
        try:
            with torch.no_grad():
                agree = torch.allclose(
                    many(probe), loop(probe), rtol=1e-5, atol=1e-6, equal_nan=True
                )
        except Exception:
            agree = False
        return Batched(many) if agree else loop


def make_problem(
    name: str,
    module: nn.Module,
    inp: torch.Tensor,
    wrt: str,
    has_analytic: bool,
    batch: int = 1,
    vectorize: bool = False,
    output: torch.Tensor | None = None,
    copy_input: bool = False,
) -> Problem:
    """Flatten ``module`` at ``inp`` into f: R^N -> R^M w.r.t. its input or parameters.

    ``inp`` carries a leading batch dimension when ``batch`` > 1. The module is used as it is
    (its mode and requires_grad flags are left alone). ``vectorize``: many input points of a
    module that does not accept a batch go through ``torch.func.vmap`` where it can (the
    library's plain functions), not a loop (the runner's default).
    ``output``: f at ``inp``, already checked (the library's ``prepare``): f is then not
    evaluated here. ``copy_input``: f writes into its input, so each call gets a copy.
    """
    sample_shape = tuple(inp.shape[1:]) if batch > 1 else tuple(inp.shape)
    analytic_fn = getattr(module, "analytic_jacobian", None) if has_analytic else None
    sparsity = getattr(module, "jacobian_sparsity", None) if wrt == "input" else None
    blocks = getattr(module, "jacobian_blocks", None) if wrt == "input" else None
    native = bool(getattr(module, "accepts_batch", False))

    if wrt == "input":
        call = _direct(module, copy_input)
        flat = len(sample_shape) == 1 and output is not None and output.dim() == 1
        if flat and not copy_input:
            f = call  # already R^N -> R^M: no wrapper between a strategy and f

        else:

            def f(v: torch.Tensor) -> torch.Tensor:
                return call(v.reshape(sample_shape)).reshape(-1)

        def forward_many(v: torch.Tensor) -> torch.Tensor:
            return call(v.reshape(v.shape[0], *sample_shape))

        def f_native(v: torch.Tensor) -> torch.Tensor:
            return forward_many(v).reshape(v.shape[0], -1)

        x = inp.detach().reshape(batch, -1) if batch > 1 else inp.detach().reshape(-1)
        point = x.reshape(batch, -1)[0].reshape(sample_shape)
        if output is None:
            output = first_output(name, lambda: call(point), x.dtype)
        if native:
            check_batched(name, forward_many, f, x.reshape(batch, -1))
            f_many: Fn = Batched(f_native)
        elif vectorize:
            f_many = VmapOrLoop(f)
        else:
            f_many = Loop(f)
    elif wrt == "params":
        if batch > 1:
            raise ConfigError("batch > 1 needs wrt=input (per-sample Jacobians of the input)")
        if not any(True for _ in module.parameters()):
            raise ConfigError(f"model {name!r} has no parameters; use wrt=input")
        flat_params = FlatParams(module)
        fixed_input = inp.detach()

        def f(theta: torch.Tensor) -> torch.Tensor:
            return flat_params.call(theta, fixed_input).reshape(-1)

        x = flat_params.vector()
        output = first_output(name, lambda: flat_params.call(x, fixed_input), x.dtype)
        f_many = VmapOrLoop(f)
        f_many._chosen = f_many.choose(x)
        analytic_fn = None
    else:
        raise ConfigError(f"unknown wrt {wrt!r}; valid choices: {', '.join(WRT_CHOICES)}")

    return Problem(
        name=name,
        wrt=wrt,
        f=f,
        x=x,
        n_in=x.reshape(batch, -1).shape[1],
        n_out=output.numel(),
        f_many=f_many,
        analytic=analytic_fn,
        module=module,
        input=inp.detach(),
        batch=batch,
        sparsity=sparsity,
        blocks=blocks,
    )


def _direct(module: nn.Module, copy_input: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """What computes f: a plain function itself (its wrapper module has no hooks to run),
    else the module; given a copy of its input where it writes into it."""
    call = module.fn if isinstance(module, FunctionModule) else module
    if not copy_input:
        return call

    def on_a_copy(v: torch.Tensor) -> torch.Tensor:
        return call(v.clone())

    return on_a_copy
