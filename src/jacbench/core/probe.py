"""What ``jacbench.prepare`` learns about f before any strategy: two evaluations of f.

The first runs f at a copy of the point under a ``TorchFunctionMode`` that follows what is
computed from x: it sees graph cuts (``.numpy()``, ``.item()``, ``.detach()``, ``.data``,
``torch.no_grad()``), random operations, and writes into the input. The second runs f again:
two different values (dropout, random numbers, changed state) have no Jacobian. A seen cut is
then proved or cleared numerically (float64 central differences against forward and reverse
mode): a detach that only builds a mask is accepted, one that changes a derivative refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from jacbench.core.errors import GraphCut, RandomFunction, UnsupportedFunction
from jacbench.core.float64 import in_float64
from jacbench.core.model_checks import check_output, evaluated
from jacbench.core.prepared import TORCH_STATE

# Tensor methods that hand a value on outside autograd, and how to name them to a user
CUTS = {
    "numpy": ".numpy()",
    "__array__": "numpy (np.asarray / np.array of a tensor)",
    "item": ".item()",
    "tolist": ".tolist()",
    "detach": ".detach()",
    "detach_": ".detach_()",
    "__float__": "float()",
    "__int__": "int()",
    "__index__": "int()",
    "__complex__": "complex()",
    "__get__": ".data",  # the only attribute of a tensor read through a property that cuts
}
NO_GRAD = "torch.no_grad() (or inference_mode)"
# Random operations, named where f calls them (the repeated evaluation decides)
RANDOM = {
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm",
    "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "multinomial", "poisson",
    "exponential_", "geometric_", "cauchy_", "log_normal_", "random_", "rrelu", "gumbel_softmax",
}  # fmt: skip
DETERMINISM_ULPS = 100  # two calls at one point may differ by this many rounding units
PROBE_SLACK = 1e-7  # relative mismatch the difference check tolerates beyond its own bound


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in an argument or a result (nested in lists, tuples and dicts)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


class _FromX(TorchFunctionMode):
    """Follows which tensors are computed from x (by identity: each one is held meanwhile)
    and notes the calls that cut them off autograd, and the random calls."""

    def __init__(self, x: torch.Tensor) -> None:
        super().__init__()
        self.held: dict[int, torch.Tensor] = {id(x): x}  # computed from x, seen by autograd
        self.off: dict[int, torch.Tensor] = {}  # computed from x, cut off autograd
        self.cuts: list[str] = []
        self.random: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in RANDOM and name not in self.random and kwargs.get("training", True):
            self.random.append(name)
        inputs = _tensors((args, kwargs))
        followed = any(id(t) in self.held for t in inputs)
        if not followed and not any(id(t) in self.off for t in inputs):
            return out
        data = name == "__get__" and getattr(func, "__self__", None) is torch.Tensor.data
        cut = (name in CUTS and (name != "__get__" or data)) or (
            followed and not torch.is_grad_enabled() and name != "_set_grad_enabled"
        )
        if cut:
            self._cut(CUTS.get(name, NO_GRAD))
        into = self.held if followed and not cut else self.off
        for t in _tensors(out):
            into[id(t)] = t
        return out

    def _cut(self, what: str) -> None:
        if what not in self.cuts:
            self.cuts.append(what)


@dataclass(frozen=True)
class Probed:
    """f at the point, and what its evaluation showed."""

    output: torch.Tensor


def check_point(x: object) -> torch.Tensor:
    """A detached copy of the point ``x``; anything jacbench cannot differentiate at is one
    ``UnsupportedFunction`` naming it and what is valid."""
    if not isinstance(x, torch.Tensor):
        raise UnsupportedFunction(
            f"the point x is a {type(x).__name__}, not a torch.Tensor; pass a floating-point "
            "tensor (torch.as_tensor(x, dtype=torch.float64) converts a list or numpy array)"
        )
    if x.is_complex() or not x.is_floating_point():
        raise UnsupportedFunction(
            f"the point x has dtype {str(x.dtype).removeprefix('torch.')}; a Jacobian needs a "
            "real floating-point point (float64, float32, float16 or bfloat16): convert it "
            "(x.double()), or split a complex point into real and imaginary parts "
            "(torch.view_as_real)"
        )
    if x.numel() == 0:
        raise UnsupportedFunction(
            f"the point x has no elements (shape {tuple(x.shape)}): nothing to differentiate"
        )
    if x.device.type == "meta":
        raise UnsupportedFunction("the point x is on the meta device: it has no values")
    return x.detach().clone()


def probe(
    f: Callable[[torch.Tensor], Any], x: torch.Tensor, name: str, by_ad: bool = True
) -> Probed:
    """Evaluate ``f`` twice at ``x`` (a copy each time) and refuse, with one error naming the
    cause and what to do, a function without a Jacobian to prepare: an output that is not a
    real floating-point tensor, randomness, or (``by_ad``: for a strategy that differentiates
    f's program rather than differencing its values) a derivative cut off part of f."""
    given = x.clone()
    follow = _FromX(given)

    def followed() -> object:
        with torch.enable_grad(), follow:
            return f(given)

    output = _checked_output(name, evaluated(name, followed, x.dtype))
    with torch.no_grad():
        again = f(x.clone())
    _deterministic(output, again, follow.random)
    if follow.cuts and by_ad:
        _cut_confirmed(f, x, follow.cuts)
    return Probed(output)


def _checked_output(name: str, out: object) -> torch.Tensor:
    """f's output, when it is one real floating-point tensor with elements."""
    if not isinstance(out, torch.Tensor):
        raise UnsupportedFunction(
            f"f returns a {type(out).__name__}, not a torch.Tensor; jacbench differentiates a "
            "function that returns one tensor: concatenate a tuple's or dict's parts "
            "(torch.cat([a.reshape(-1), b.reshape(-1)])), and return tensors instead of Python "
            "numbers (no .item(), float() or .tolist())"
        )
    out = check_output(name, out).detach()
    if out.is_complex():
        raise UnsupportedFunction(
            "f returns a complex tensor; jacbench differentiates real functions: return "
            "torch.view_as_real(y) (real and imaginary parts as a last dimension of 2)"
        )
    if out.numel() == 0:
        raise UnsupportedFunction(
            f"f returns an empty tensor (shape {tuple(out.shape)}): nothing to differentiate"
        )
    return out


def _deterministic(first: torch.Tensor, again: object, random: list[str]) -> None:
    """Refuse f when two evaluations at one point differ (beyond rounding)."""
    if isinstance(again, torch.Tensor) and again.shape == first.shape:
        diff = (again.detach() - first).nan_to_num(0.0).norm()
        scale = max(float(first.nan_to_num(0.0).norm()), float(torch.finfo(first.dtype).tiny))
        gap = float(diff) / scale
        if gap <= DETERMINISM_ULPS * torch.finfo(first.dtype).eps:
            return
        what = f"two calls at the same point differ by {gap:.2g} (relative)"
    else:
        what = "two calls at the same point return outputs of different shapes"
    calls = f"; it calls {', '.join(random)}" if random else ""
    raise RandomFunction(
        f"f is not a function of its point alone: {what}{calls}. A Jacobian of it cannot be "
        "prepared: put its modules in evaluation mode (model.eval(): dropout off), or draw "
        "its random numbers from a generator seeded inside f "
        "(torch.Generator().manual_seed(0)), so that one point gives one value"
    )


def _cut_confirmed(f: Callable, x: torch.Tensor, cuts: list[str]) -> None:
    """Refuse f where a cut seen on the way from x to its output changes its derivative:
    float64 central differences along a random direction v (with their own error bound,
    from the gap between steps h and 2h) against forward mode's J v and reverse mode's
    u.J v. A cut that changes nothing (a mask from ``x.detach() > 0``) passes."""
    f64, x64 = in_float64(f), x.detach().to(torch.float64)
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(x64.shape, generator=gen, dtype=torch.float64)
    v = (v / v.norm()).to(x64.device)
    eps = torch.finfo(torch.float64).eps
    h = eps ** (1 / 3) * max(1.0, float(x64.abs().max()))
    with torch.no_grad():
        values = {k: f64(x64 + k * h * v).reshape(-1).to(torch.float64) for k in (-2, -1, 1, 2)}
    if not all(bool(torch.isfinite(y).all()) for y in values.values()):
        return  # the differences leave f's domain: nothing proved either way
    d1 = (values[1] - values[-1]) / (2 * h)
    d2 = (values[2] - values[-2]) / (4 * h)
    rounding = eps * float(values[1].norm() + values[-1].norm())
    bound = 10 * (float((d1 - d2).norm()) + rounding / h) + PROBE_SLACK * float(d1.norm())
    u = torch.randn(d1.shape, generator=gen, dtype=torch.float64).to(d1.device)
    wrong = []
    with TORCH_STATE:
        try:
            forward = torch.func.jvp(f64, (x64,), (v,))[1].reshape(-1)
            if float((forward - d1).norm()) > bound:
                wrong.append("forward")
        except Exception:
            wrong.append("forward")
        try:
            out, pull = torch.func.vjp(f64, x64)  # type: ignore[misc]  # stub: or has_aux's triple
            back = pull(u.reshape(out.shape).to(out.dtype))[0].reshape(-1)
            if abs(float(back @ v) - float(u @ d1)) > float(u.norm()) * bound:
                wrong.append("reverse")
        except Exception:
            wrong.append("reverse")
    if not wrong:
        return
    modes = " and ".join(wrong) + " mode"
    raise GraphCut(
        f"f cuts part of its computation off automatic differentiation: between x and its "
        f"output it calls {', '.join(cuts)}, and {modes}'s derivative of f differs from f's "
        "own (float64 central differences along a random direction), so an exact strategy "
        "would return a wrong Jacobian. Compute that part with torch operations on the "
        "tensor, without .numpy(), .item(), .tolist(), .detach(), .data or torch.no_grad(); "
        "or use a finite-difference strategy (fd_central), which sees f as it is"
    )
