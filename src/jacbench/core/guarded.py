"""A Jacobian graph made from f as dynamo captures it, kept valid by dynamo's guards.

``torch.compile(f, backend=..., fullgraph=True)`` hands the backend f's graph with every
tensor f reads (input, parameters, buffers, closure and global tensors) as graph inputs,
read afresh at each call, and guards everything else it specialised to (attributes,
namespaces, globals): a failed guard captures f again. The backend builds the graph of
``(f(x), J(x))`` over the same inputs (``make``), runs it instead of f's graph, and leaves
the Jacobian for the call. f that cannot be captured whole (``.item()``, a branch on a
value), or is captured again too often, raises: the caller then answers untraced.
"""

from __future__ import annotations

import threading
import time
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from jacbench.core import torch_internals
from jacbench.core.errors import RetraceStorm, one_line

# (f's graph over its inputs, the inputs, x's index among them, the call's whole x)
#   -> (x, *other inputs) -> (f(x), J(x))
Make = Callable[
    [Callable[..., Any], tuple[torch.Tensor, ...], int, torch.Tensor], Callable[..., Any]
]
RETRACE_WARNING = 4  # captures after the first at which a warning says what keeps changing
CHANGING = (
    "a parameter, attribute, closure variable or global that f reads keeps changing; make "
    "the value an input of f, or use an eager strategy (jacfwd, jacrev), which reads it at "
    "each call"
)


class NotCaptured(RuntimeError):
    """f could not be captured whole by dynamo at this call (why: the message)."""


def own_entry(fn: Callable) -> Callable:
    """``fn`` called from a function with a code object of its own: dynamo keeps at most a
    few versions per code object, and every prepared Jacobian then has its own."""

    def entry(v: torch.Tensor) -> object:
        return fn(v)

    code = entry.__code__.replace()  # a copy: a new code object
    return types.FunctionType(code, entry.__globals__, entry.__name__, None, entry.__closure__)


class Guarded:
    """``(f(x), J(x))`` by the graph ``make`` builds from dynamo's capture of ``f`` at
    ``point(x)``; captured again wherever dynamo's guards fail. ``storm="raise"``: a capture
    again before the calls since the last one spent what it cost raises ``RetraceStorm``
    (tracing would cost more than it saves); "warn": said once, and captured again."""

    def __init__(
        self,
        f: Callable[[torch.Tensor], Any],
        point: Callable[[torch.Tensor], torch.Tensor],
        make: Make,
        storm: str = "warn",
    ) -> None:
        self.f, self.point, self.make, self.storm = f, point, make, storm
        self.captures, self.trace_s, self.since_s, self.warned = 0, 0.0, 0.0, False
        self._call = threading.local()  # this thread's call: its x, point and answer
        self._hooks = torch_internals.module_hooks()
        self._compiled = self._captured()

    def _captured(self) -> Callable:
        """f as dynamo captures it, with this object's backend (a code object of its own)."""
        return torch.compile(
            own_entry(self.f), backend=self._backend, fullgraph=True, dynamic=False
        )

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        call = self._call
        call.x, call.point, call.out, call.storm = x, self.point(x), None, None
        hooks = torch_internals.module_hooks()
        if hooks != self._hooks:  # a global module hook added or removed: capture f again
            self._hooks, self._compiled = hooks, self._captured()
        try:
            self._compiled(call.point)  # a capture's own warnings are silenced where it builds
        except NotCaptured:
            raise
        except Exception as exc:
            if call.storm is not None:
                raise call.storm from None
            inner = getattr(exc, "inner_exception", None)  # dynamo's wrapper of the backend's
            if isinstance(inner, NotCaptured):
                raise inner from None
            reason = one_line(exc)
            raise NotCaptured(f"{type(exc).__name__}: {reason}") from exc
        finally:
            out, call.x, call.point, call.out = call.out, None, None, None
        if out is None:  # f ran without the graph: no Jacobian was made
            raise NotCaptured("f ran outside a captured graph")
        return out

    def _backend(self, gm: torch.fx.GraphModule, inputs: list[Any]) -> Callable:
        """dynamo's backend: f's graph -> a callable that computes the Jacobian as well."""
        call = self._call
        index = [k for k, t in enumerate(inputs) if t is call.point]
        if len(index) != 1:
            raise NotCaptured("f's graph does not take its input as one tensor")
        if self.captures:
            self._again()
        k = index[0]
        start = time.perf_counter()

        def f_of(*args: torch.Tensor) -> Any:
            (value,) = gm.forward(*args)  # one output: f's value (no module hooks of its own)
            return value

        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        if isinstance(out, (tuple, list)) and len(out) != 1:
            raise NotCaptured("f's graph has outputs besides f's value (it changes state)")
        built: list[Callable[..., Any]] = []
        failed: list[NotCaptured] = []

        def jacobian_instead(*args: torch.Tensor) -> tuple[torch.Tensor]:
            if failed:
                raise failed[0]
            if not built:  # built at its first run, outside dynamo's tracing context
                try:
                    built.append(self._made(f_of, list(args), k, call.x))
                except NotCaptured as exc:
                    failed.append(exc)
                    raise
                self.captures += 1
                self.trace_s, self.since_s = time.perf_counter() - start, 0.0
            begin = time.perf_counter()
            value, jac = built[0](call.x, *args[:k], *args[k + 1 :])
            self.since_s += time.perf_counter() - begin
            call.out = (value, jac)
            return (value,)  # f's return value, read by no one: the call returns call.out

        return jacobian_instead

    def _made(self, f_of: Callable, inputs: list[Any], k: int, x: torch.Tensor) -> Callable:
        try:
            return self.make(f_of, tuple(inputs), k, x)
        except NotCaptured:
            raise
        except Exception as exc:  # said as it is
            raise NotCaptured(f"{type(exc).__name__}: {one_line(exc)}") from exc

    def _again(self) -> None:
        """A capture after the first: a storm raises or warns (``storm``)."""
        if self.storm == "raise" and self.since_s < self.trace_s:
            self._call.storm = RetraceStorm(
                f"the Jacobian's graph would be traced again after {self.since_s * 1e3:.2g} "
                f"ms of calls, where tracing it took {self.trace_s:.2g} s: {CHANGING}"
            )
            raise self._call.storm
        if self.captures >= RETRACE_WARNING and not self.warned:
            self.warned = True
            warnings.warn(
                f"the Jacobian's graph was traced again {self.captures} times: {CHANGING}",
                RuntimeWarning,
                stacklevel=2,
            )
