"""The torch internals the traced tiers need, each run once, and the torch version they were
checked on (``jacbench.core.torch_internals``): a torch upgrade that moves one of them fails
here, naming it, instead of somewhere inside a strategy."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

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
    compiled = torch_internals.inductor_compile(graph, [x], {})
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


def test_a_tensors_version_counts_its_writes():
    t = torch.zeros(3)
    before = torch_internals.version_counter(t)
    t.add_(1)
    assert torch_internals.version_counter(t) == before + 1
    with torch.inference_mode():
        made = torch.zeros(3)
    with pytest.raises(RuntimeError):
        torch_internals.version_counter(made)


def test_pytree_and_the_aten_operations_of_private_names():
    assert torch_internals.tree_leaves(({"a": 1}, [2, (3,)])) == [1, 2, 3]
    assert torch_internals.tree_map(lambda v: v * 2, (1, [2])) == (2, [4])
    for op in (torch_internals.UNSAFE_VIEW, torch_internals.TO_COPY):
        assert isinstance(op, torch._ops.OpOverload)
    assert torch_internals.RESHAPE_ALIAS.name() == "aten::_reshape_alias"


def test_the_profilers_allocation_events_sum_to_a_peak():
    cpu = [torch.profiler.ProfilerActivity.CPU]
    prof = torch.profiler.profile(activities=cpu, profile_memory=True)
    prof.start()
    big = torch.empty(1 << 20, dtype=torch.uint8)
    del big
    prof.stop()
    events = torch_internals.profiled_allocations(prof)
    assert events is not None
    assert any(nbytes >= 1 << 20 for _, nbytes in events)
    assert any(nbytes <= -(1 << 20) for _, nbytes in events)


# Where torch's private names may appear in src: this module only. What counts: an import of a
# torch module with a private segment (torch._dynamo, torch.utils._pytree), an attribute chain
# from torch (or torch.ops.aten) through a private name, and the private attributes, keyword
# arguments and helpers of torch's objects that jacbench has used.
TORCH_PRIVATE = {"_version", "_schema", "_warnings", "_C", "_make_wrapper_subclass"}
TORCH_PRIVATE |= {"_allow_non_fake_inputs", "_enter_inference_mode", "_global_forward_hooks"}
TORCH_PRIVATE |= {"kineto_results", "set_torch_threads", "_disabled_torch_function_impl"}


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def _chain(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def torch_private_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("torch") and _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            names = [n for n in names if _private(n) or n.rpartition(".")[2] in TORCH_PRIVATE]
        elif isinstance(node, ast.Attribute):
            chain = _chain(node)
            rooted = chain.split(".")[0] in ("torch", "aten") and _private(chain)
            if rooted or node.attr in TORCH_PRIVATE:
                names = [chain or node.attr]
        elif isinstance(node, ast.keyword) and node.arg in TORCH_PRIVATE:
            names = [node.arg]
        found += [f"{path.name}:{getattr(node, 'lineno', '?')}: {n}" for n in names]
    return found


def test_torchs_private_names_are_used_in_torch_internals_only():
    src = Path(torch_internals.__file__).parents[1]
    outside = [
        use
        for path in sorted(src.rglob("*.py"))
        if path.name != "torch_internals.py"
        for use in torch_private_uses(path)
    ]
    assert outside == [], "\n".join(outside)
    assert torch_private_uses(Path(torch_internals.__file__))  # the rule sees them there
