"""A Problem: the function to differentiate and the point(s), in one dtype on one device.

Strategies see a flat view: ``f`` maps a 1-D tensor of N values to a 1-D tensor of M values,
and the Jacobian has shape (M, N). With ``batch`` B > 1 there are B independent points, x
has shape (B, N) and the per-sample Jacobians have shape (B, M, N). How that view is made
from a model (w.r.t. its input or its parameters) is decided here, once.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import hydra.utils
import torch
from torch import nn

from jacbench.errors import ConfigError

# Keys of a model config that belong to jacbench, not to the model's constructor.
RESERVED_MODEL_KEYS = ("name", "wrt", "input_shape", "batch")
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
    # (w.r.t. parameters) vmap can batch it (``batched_natively``), else a loop.
    f_many: Fn
    batched_natively: bool
    # The model's own formula for the Jacobian at one point, where it has one.
    analytic: Fn | None
    module: nn.Module = field(repr=False)
    input: torch.Tensor = field(repr=False)  # the model's input, in its own shape
    batch: int = 1

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    @property
    def device(self) -> torch.device:
        return self.x.device

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


def _loop(f: Fn) -> Fn:
    return lambda points: torch.stack([f(p) for p in points])


def _vmapped_or_loop(f: Fn, x: torch.Tensor) -> tuple[Fn, bool]:
    """Many parameter vectors at once through torch.func.vmap (functional_call batches);
    a loop where some op of the model has no batching rule."""
    many = torch.func.vmap(f)
    try:
        with torch.no_grad():
            many(x.unsqueeze(0).expand(2, -1))
    except Exception:
        return _loop(f), False
    return many, True


def make_problem(
    name: str,
    module: nn.Module,
    inp: torch.Tensor,
    wrt: str,
    has_analytic: bool,
    batch: int = 1,
) -> Problem:
    """Flatten ``module`` at ``inp`` into f: R^N -> R^M w.r.t. its input or parameters.

    ``inp`` carries a leading batch dimension when ``batch`` > 1.
    """
    module.eval().requires_grad_(False)
    sample_shape = tuple(inp.shape[1:]) if batch > 1 else tuple(inp.shape)
    analytic_fn = getattr(module, "analytic_jacobian", None) if has_analytic else None
    native = bool(getattr(module, "accepts_batch", False))

    if wrt == "input":

        def f(v: torch.Tensor) -> torch.Tensor:
            return module(v.reshape(sample_shape)).reshape(-1)

        def f_native(v: torch.Tensor) -> torch.Tensor:
            return module(v.reshape(v.shape[0], *sample_shape)).reshape(v.shape[0], -1)

        x = inp.detach().reshape(batch, -1) if batch > 1 else inp.detach().reshape(-1)
        f_many = f_native if native else _loop(f)
    elif wrt == "params":
        if batch > 1:
            raise ConfigError("batch > 1 needs wrt=input (per-sample Jacobians of the input)")
        names = [n for n, _ in module.named_parameters()]
        if not names:
            raise ConfigError(f"model {name!r} has no parameters; use wrt=input")
        params = [p.detach() for _, p in module.named_parameters()]
        shapes = [p.shape for p in params]
        sizes = [p.numel() for p in params]
        fixed_input = inp.detach()

        def f(theta: torch.Tensor) -> torch.Tensor:
            chunks = torch.split(theta, sizes)
            values = {n: c.reshape(s) for n, c, s in zip(names, chunks, shapes, strict=True)}
            return torch.func.functional_call(module, values, (fixed_input,)).reshape(-1)

        x = torch.cat([p.reshape(-1) for p in params]).clone()
        f_many, native = _vmapped_or_loop(f, x)
        analytic_fn = None
    else:
        raise ConfigError(f"unknown wrt {wrt!r}; valid choices: {', '.join(WRT_CHOICES)}")

    with torch.no_grad():
        n_out = f(x.reshape(batch, -1)[0]).numel()
    return Problem(
        name=name,
        wrt=wrt,
        f=f,
        x=x,
        n_in=x.reshape(batch, -1).shape[1],
        n_out=n_out,
        f_many=f_many,
        batched_natively=native,
        analytic=analytic_fn,
        module=module,
        input=inp.detach(),
        batch=batch,
    )


def _sample_input(module: nn.Module, shape: Sequence[int], seed: int, batch: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    sampler = getattr(module, "sample_input", None)

    def one() -> torch.Tensor:
        if sampler is not None:
            return sampler(gen).to(torch.float64)
        return torch.randn(tuple(shape), generator=gen, dtype=torch.float64)

    return torch.stack([one() for _ in range(batch)]) if batch > 1 else one()


def build_problem(
    model_cfg: dict[str, Any], dtype: torch.dtype, device: torch.device, seed: int
) -> Problem:
    """Instantiate the model config (a Hydra ``_target_``) and freeze it into a Problem."""
    cfg = dict(model_cfg)
    target = cfg.get("_target_")
    if not target:
        raise ConfigError("the model config needs a _target_ (an importable callable or module)")
    name = cfg.pop("name", None) or str(target).rsplit(".", 1)[-1]
    wrt = cfg.pop("wrt", "input")
    input_shape = cfg.pop("input_shape", None)
    batch = cfg.pop("batch", None) or 1
    if int(batch) < 1:
        raise ConfigError(f"model {name!r}: batch must be >= 1, got {batch}")
    torch.manual_seed(seed)  # parameter initialisation is part of the problem's identity
    try:
        obj = hydra.utils.instantiate(cfg, _convert_="all")
    except Exception as exc:  # Hydra wraps the model's own error: report the innermost one
        root: BaseException = exc
        while root.__cause__ is not None:
            root = root.__cause__
        detail = " ".join(str(root).split())
        raise ConfigError(f"cannot build model {name!r} ({target}): {detail}") from exc
    module = obj if isinstance(obj, nn.Module) else FunctionModule(obj)
    shape = input_shape if input_shape is not None else getattr(module, "input_shape", None)
    if shape is None:
        raise ConfigError(f"model {name!r} needs input_shape (e.g. model.input_shape=[8])")
    if math.prod(shape) <= 0:
        raise ConfigError(f"model {name!r}: input_shape must be positive, got {list(shape)}")
    module = module.to(device=device, dtype=dtype)
    # The point is drawn in float64 and rounded once, so every dtype sees the same point.
    inp = _sample_input(module, shape, seed, int(batch)).to(device=device, dtype=dtype)
    return make_problem(name, module, inp, wrt, hasattr(module, "analytic_jacobian"), int(batch))


def _one_reference(problem: Problem, x: torch.Tensor) -> torch.Tensor:
    if problem.analytic is not None:
        return problem.analytic(x)
    try:
        return torch.func.jacrev(problem.f)(x)
    except Exception:  # some ops have no vmap rule: fall back to the plain row loop
        return torch.autograd.functional.jacobian(problem.f, x)


def reference_jacobian(problem: Problem) -> tuple[torch.Tensor, str]:
    """The trusted Jacobian, on CPU in float64, and how it was obtained.

    Analytic where the model provides a formula; else an exact AD Jacobian of a float64 copy
    of the same function at the same rounded point. Never timed.
    """
    exact = problem.cast(torch.float64)
    jacs = [_one_reference(exact, x) for x in exact.points]
    jac = torch.stack(jacs).reshape(exact.jacobian_shape).detach().cpu()
    return jac, "analytic" if exact.analytic is not None else "autograd_float64"
