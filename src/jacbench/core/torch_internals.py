"""The parts of torch that are not its public API and that jacbench needs, in one place.

Folding forward-mode graphs needs make_fx's aten graphs, fake tensors and inductor without
dynamo; compiled calls need functorch's layer stack and inference-mode guards; recording f's
operations needs a wrapper tensor type and a dispatch mode torch does not wrap for dynamo;
patterns need pytree, version counters and aten operations of private names; the CPU peak
memory needs the profiler's raw allocation events. Used through this module only (a test
checks src), run by ``tests/test_torch_internals.py``, checked on torch ``CHECKED_ON``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_leaves, tree_map

CHECKED_ON = "2.13"  # torch's major.minor these were last checked with
__all__ = ["tree_leaves", "tree_map"]  # torch's pytree utilities: no public module in 2.13

aten = torch.ops.aten
UNSAFE_VIEW = aten._unsafe_view.default  # a view whose output is not marked as one
TO_COPY = aten._to_copy.default  # .to(dtype/device): values copied as they are
RESHAPE_ALIAS = aten._reshape_alias.default  # a view by explicit sizes and strides


def aten_graph(fn: Callable, *inputs: torch.Tensor) -> fx.GraphModule:
    """``fn(*inputs)`` as a graph of aten operations, traced on real tensors (torch 2.13's
    fake tensors fail inside forward AD). Every node's ``meta["val"]`` holds a fake tensor of
    its output's shape and strides."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def arguments(*values: torch.Tensor) -> object:
        return fn(*values)

    return make_fx(arguments)(*inputs)


def trace_shapes_only(f: Callable, x: torch.Tensor) -> fx.GraphModule:
    """``f`` traced on a fake ``x`` (shapes, no values): Python branching on values,
    ``.item()`` and the like raise here. The graph computes f: the tensors f reads are its
    constants, the real ones (not fakes of them)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def one_argument(v: torch.Tensor) -> object:  # make_fx traces every parameter of f
        return f(v)

    return make_fx(one_argument, tracing_mode="fake", _allow_non_fake_inputs=True)(x)


@contextmanager
def fake_mode() -> Iterator[Any]:
    """A fake tensor mode that takes real tensors (a graph's constants) as they come."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def fake_tensor(mode: Any, x: torch.Tensor) -> torch.Tensor:
    return mode.from_tensor(x)


def inductor_compile(
    graph: fx.GraphModule, inputs: list[Any], options: dict, cache: bool = True
) -> Callable:
    """An aten graph compiled by inductor directly, without dynamo (nothing left to trace,
    no guards checked at each call), specialised to ``x``'s shape. Through inductor's
    ``standalone_compile``, whose fake mode has a shape environment: inductor's FX graph
    cache (and AOT autograd's) then applies where ``cache`` (``torch._inductor.compile``
    bypasses it, "No shape env": a compile cost seconds in every process). A cache entry
    is keyed by the graph, its inputs' shapes and strides, torch's version and the
    compile options, and the graph's constants are inputs of the compiled code, not part of
    it (two models of one architecture share an entry)."""
    import torch._inductor

    if not cache:  # the plain way: no cache artefacts made (standalone_compile would warn)
        return torch._inductor.compile(graph, inputs, options=options)
    return torch._inductor.standalone_compile(
        graph, inputs, dynamic_shapes="from_example_inputs", options={"config_patches": options}
    )


def module_hooks() -> tuple[int, ...]:
    """Which global module hooks are registered now (``register_module_forward_hook`` and
    the like): dynamo's guards do not follow one registered after a capture."""
    from torch.nn.modules import module

    hooks = (
        module._global_forward_pre_hooks,
        module._global_forward_hooks,
        module._global_backward_pre_hooks,
        module._global_backward_hooks,
    )
    return tuple(key for table in hooks for key in table)


def version_counter(t: torch.Tensor) -> int:
    """The count of writes into ``t``'s storage (shared with its views); RuntimeError for a
    tensor made in inference mode, which counts none."""
    return t._version


def profiled_allocations(prof: torch.profiler.profile) -> list[tuple[int, int]] | None:
    """(start in ns, bytes) of each CPU allocation (bytes > 0) and free (< 0) that ``prof``
    (``profile_memory=True``, stopped) recorded; None where it recorded nothing."""
    results = prof.profiler.kineto_results if prof.profiler is not None else None
    if results is None:
        return None
    cpu = torch.autograd.DeviceType.CPU
    return [
        (e.start_ns(), e.nbytes())  # type: ignore[attr-defined]  # torch's stub lacks nbytes
        for e in results.events()
        if e.name() == "[memory]" and e.device_type() == cpu
    ]


def op_schema(target: object) -> Any | None:
    """An aten operation's schema (which arguments it writes, which outputs alias an
    input); None for anything else (operator.getitem, a Python function)."""
    return getattr(target, "_schema", None)


def functorch_depth() -> int:
    """How many functorch transforms (vmap, jvp, grad) the thread is inside."""
    return torch._C._functorch.get_dynamic_layer_stack_depth()


def leave_functorch_levels(depth: int) -> None:
    """Leave the functorch transforms entered beyond ``depth``."""
    torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)


_THREAD = threading.local()  # per thread: the inference-mode guards put back


def restore_inference_mode(enabled: bool) -> None:
    """Put the thread's inference mode back to ``enabled`` for the rest of the thread (a
    compiled call left it changed); the guard is kept by the thread."""
    guard = torch.autograd.grad_mode._enter_inference_mode(enabled)
    _THREAD.__dict__.setdefault("guards", []).append(guard)


def wrapper_tensor(cls: type, value: torch.Tensor) -> Any:
    """An instance of the tensor subclass ``cls`` with ``value``'s shape, strides, dtype and
    device and no storage of its own (torch's way to make a wrapper type, as its documented
    ``__torch_dispatch__`` examples do)."""
    return torch.Tensor._make_wrapper_subclass(
        cls,
        value.shape,
        strides=value.stride(),
        storage_offset=value.storage_offset(),
        dtype=value.dtype,
        device=value.device,
    )


# A wrapper type's ``__torch_function__``: every operation goes on to ``__torch_dispatch__``
# (as in torch's own wrapper types).
DISABLED_TORCH_FUNCTION = torch._C._disabled_torch_function_impl


def _dispatch_mode() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class DispatchMode(TorchDispatchMode):
        """A ``TorchDispatchMode`` whose handler torch does not wrap to keep torch.compile
        out of it: that wrapper imports torch._dynamo on its first call."""

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

    return DispatchMode


DispatchMode = _dispatch_mode()
