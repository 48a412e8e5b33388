"""The torch internals the traced tiers need, each run once, and the torch version they were
checked on (``jacbench.core.torch_internals``): a torch upgrade that moves one of them fails
here, naming it, instead of somewhere inside a strategy."""

from __future__ import annotations

import threading

import pytest
import torch

from jacbench.core import torch_internals


def test_they_were_checked_on_this_torch():
    major_minor = ".".join(torch.__version__.split(".")[:2])
    assert major_minor == torch_internals.CHECKED_ON, (
        f"jacbench.core.torch_internals was checked on torch {torch_internals.CHECKED_ON}; "
        f"this is {torch.__version__}: run this file, fix what fails, then update CHECKED_ON"
    )


def test_an_aten_graph_of_a_forward_mode_jacobian_with_shapes_and_strides():
    x = torch.randn(3, dtype=torch.float64)
    graph = torch_internals.aten_graph(torch.func.jacfwd(torch.sin), x)
    torch.testing.assert_close(graph(x), torch.diag(torch.cos(x)))
    node = next(n for n in graph.graph.nodes if n.op == "call_function")
    assert isinstance(node.target, torch._ops.OpOverload)
    assert isinstance(node.meta["val"], torch.Tensor) and node.meta["val"].stride() is not None


def test_a_shapes_only_trace_refuses_branching_on_values():
    torch_internals.trace_shapes_only(lambda v: v * 2, torch.ones(3))
    with pytest.raises(Exception, match="data-dependent|Could not guard"):
        torch_internals.trace_shapes_only(lambda v: v if v.sum() > 0 else -v, torch.ones(3))


def test_fake_tensors_of_real_ones_and_real_constants_mixed():
    with torch_internals.fake_mode() as mode:
        fake = torch_internals.fake_tensor(mode, torch.ones(2, 3))
        out = fake.t() @ torch.ones(2, 4)  # a real constant meets a fake tensor
    assert out.shape == (3, 4) and type(out).__name__ == "FakeTensor"


@pytest.mark.compiles
@pytest.mark.slow
def test_inductor_compiles_an_aten_graph_without_dynamo():
    x = torch.randn(3, dtype=torch.float64)
    graph = torch_internals.aten_graph(torch.func.jacfwd(torch.sin), x)
    compiled = torch_internals.inductor_compile(graph, x, {})
    torch.testing.assert_close(compiled(x), torch.diag(torch.cos(x)))


def test_an_operations_schema_says_what_it_writes_and_what_it_views():
    assert torch_internals.op_schema(torch.ops.aten.fill_.Scalar).is_mutable
    view = torch_internals.op_schema(torch.ops.aten.view.default)
    assert not view.is_mutable and view.returns[0].alias_info is not None
    assert torch_internals.op_schema(len) is None


def test_functorch_levels_are_read_and_left():
    depth = torch_internals.functorch_depth()
    seen = []

    def inside(v):
        seen.append(torch_internals.functorch_depth())
        return v

    torch.func.vmap(inside)(torch.ones(2, 3))
    assert seen == [depth + 1] and torch_internals.functorch_depth() == depth
    torch_internals.leave_functorch_levels(depth)  # nothing entered: nothing left
    assert torch_internals.functorch_depth() == depth


def test_inference_mode_is_put_back_for_the_rest_of_a_thread():
    states = []

    def thread():
        torch_internals.restore_inference_mode(True)
        states.append(torch.is_inference_mode_enabled())
        torch_internals.restore_inference_mode(False)
        states.append(torch.is_inference_mode_enabled())

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join()
    assert states == [True, False] and not torch.is_inference_mode_enabled()


def test_a_dispatch_mode_that_torch_does_not_wrap_for_dynamo_sees_each_operation():
    from torch.utils._python_dispatch import TorchDispatchMode

    # the hook this mode overrides still exists (a torch that drops it wraps the handler
    # again, importing torch._dynamo on the first operation: tests/test_sparse_trace.py)
    assert hasattr(TorchDispatchMode, "_should_skip_dynamo")
    seen = []

    class Seeing(torch_internals.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Seeing():
        out = torch.ones(3).mul(2)
    assert torch.equal(out, torch.full((3,), 2.0))
    assert torch.ops.aten.mul.Tensor in seen


def test_a_wrapper_tensor_has_its_values_shape_and_strides_and_no_storage_of_its_own():
    class Wrapped(torch.Tensor):
        __torch_function__ = torch_internals.DISABLED_TORCH_FUNCTION

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise AssertionError(f"{func} reached a value with no storage")

    value = torch.randn(4, 3, dtype=torch.float64).t()
    made = torch_internals.wrapper_tensor(Wrapped, value)
    assert isinstance(made, Wrapped)
    assert (made.shape, made.stride(), made.dtype) == (value.shape, value.stride(), value.dtype)
