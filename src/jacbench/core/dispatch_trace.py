"""f's aten operations recorded as it runs once, without torch's compiler.

The pattern tracer needs f as aten operations with their arguments and output shapes;
``make_fx``'s first use imports ``torch._dynamo`` and sympy. Here f runs on x wrapped in a
storage-less tensor type under a ``TorchDispatchMode``: an operation reading a value derived
from x runs on the real values and becomes a node of an ``fx.Graph``; operations on constants
just run. It refuses (``Refused``) what would give a pattern true at this point only: a value
of x read into Python or an output shape that depends on values, a write into a tensor
derived from x or into a constant a recorded operation read, and any error f raises on the
wrapper. The caller then traces with ``make_fx``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from jacbench.core.errors import one_line
from jacbench.core.torch_internals import (
    DISABLED_TORCH_FUNCTION,
    DispatchMode,
    op_schema,
    tree_leaves,
    tree_map,
    version_counter,
    wrapper_tensor,
)

aten = torch.ops.aten
# outputs whose shape or Python value depends on the input's values
VALUE_DEPENDENT = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)
MASKS = (torch.bool, torch.uint8)


class Refused(Exception):
    """f cannot be recorded soundly this way; the message says why."""


@dataclass(frozen=True)
class Recording:
    """f as a graph of aten operations: one placeholder (x), its operations, one output.
    Constants are the operations' arguments themselves (real tensors)."""

    graph: fx.Graph


class _Recorder:
    """The graph being recorded, and the constants its nodes read, with their versions."""

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.read: dict[int, tuple[torch.Tensor, int]] = {}  # id -> (constant kept, version)

    def call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Runs ``func`` (whose arguments include a value derived from x) on the real values
        and records it."""
        schema = op_schema(func)  # every operation that reaches a dispatch mode has one
        if schema is not None and schema.is_mutable:
            raise Refused(f"{func} writes into a tensor (mutation)")
        if _value_dependent(func, args):
            raise Refused(f"{func}'s output depends on the input's values")
        out = func(*tree_map(_value, args), **tree_map(_value, kwargs))
        leaves = tree_leaves(out)
        if not leaves or not all(isinstance(v, torch.Tensor) for v in leaves):
            raise Refused(f"{func} returns a Python value computed from the input")
        for t in tree_leaves((args, kwargs)):  # the graph holds them: none may change
            if isinstance(t, torch.Tensor) and not isinstance(t, _Traced):
                self.read.setdefault(id(t), (t, _version(t)))  # as the first node read it
        node = self.graph.call_function(func, tree_map(_node, args), tree_map(_node, kwargs))
        if isinstance(out, torch.Tensor):
            return _Traced(out, node, self)
        if not isinstance(out, (list, tuple)) or len(leaves) != len(out):
            raise Refused(f"{func} returns a nested structure")
        node.meta["val"] = out
        items = [
            _Traced(v, self.graph.call_function(operator.getitem, (node, k)), self)
            for k, v in enumerate(out)
        ]
        return type(out)(items)

    def check_constants(self) -> None:
        """Refuses where a constant a node read was written into afterwards."""
        for t, version in self.read.values():
            if _version(t) != version:
                raise Refused("f writes into a constant after an operation on x read it")


class _Traced(torch.Tensor):
    """A value derived from x: its real value, the node that made it and the recording.
    It holds no storage of its own, so that f cannot read its value but through an
    operation, which reaches ``__torch_dispatch__``."""

    value: torch.Tensor
    node: fx.Node
    recorder: _Recorder

    @staticmethod
    def __new__(cls, value: torch.Tensor, node: fx.Node, recorder: _Recorder) -> _Traced:
        made = wrapper_tensor(cls, value)
        made.value, made.node, made.recorder = value, node, recorder
        node.meta["val"] = value
        return made

    # every operation goes to __torch_dispatch__, none is handled above it (as in torch's
    # own wrapper types)
    __torch_function__ = DISABLED_TORCH_FUNCTION  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch's stub: a plain function
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        raise Refused(f"{func} ran on a recorded value outside its recording")


class _Intercept(DispatchMode):
    """Sends each operation on a recorded value to its recording; the others just run.
    Through a mode, not the wrapper type alone: torch looks a wrapper type's operations up
    among DTensor's first, importing torch.distributed.tensor and sympy."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        traced = [t for t in tree_leaves((args, kwargs)) if isinstance(t, _Traced)]
        if not traced:
            return func(*args, **kwargs)
        if len({id(t.recorder) for t in traced}) != 1:
            raise Refused(f"{func} mixes values of two recordings")
        return traced[0].recorder.call(func, tuple(args), dict(kwargs))


def _value_dependent(func: Any, args: tuple) -> bool:
    """Whether the output's shape (or Python value) may depend on the input's values:
    torch's tags say so, but of indexing (tagged for its boolean masks) only a boolean
    index computed from x makes it so (the output's shape is the count of its trues)."""
    if func is aten.index.Tensor:
        indices = args[1] if len(args) > 1 and args[1] is not None else ()
        return any(isinstance(i, _Traced) and i.dtype in MASKS for i in indices)
    return any(tag in func.tags for tag in VALUE_DEPENDENT)


def _value(arg: Any) -> Any:
    return arg.value if isinstance(arg, _Traced) else arg


def _node(arg: Any) -> Any:
    return arg.node if isinstance(arg, _Traced) else arg


def _version(t: torch.Tensor) -> int:
    """The count of writes into ``t``'s storage (shared with its views); a tensor made in
    inference mode counts none: refused, as it could change unseen."""
    try:
        return version_counter(t)
    except RuntimeError:
        raise Refused("a constant made in inference mode (its writes are not counted)") from None


def record(f: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Recording:
    """``f`` run once at ``x`` as a ``Recording``; ``Refused`` where it cannot be recorded
    soundly (module docstring)."""
    recorder = _Recorder()
    traced_x = _Traced(x.detach(), recorder.graph.placeholder("x"), recorder)
    try:
        with torch.no_grad(), _Intercept():
            result = f(traced_x)
    except Refused:
        raise
    except Exception as exc:  # f failed on the wrapper (.numpy(), an unsupported use)
        why = one_line(exc, 160)
        raise Refused(f"f failed on a recorded input ({type(exc).__name__}: {why})") from None
    first = result[0] if isinstance(result, (list, tuple)) and result else result
    if not isinstance(first, torch.Tensor):
        raise Refused(f"f returned {type(first).__name__}, not a tensor")
    recorder.check_constants()
    recorder.graph.output(_node(first))
    return Recording(recorder.graph)
