"""Forward mode with its tangents folded into matrix products, as XLA does.

``torch.func.jacfwd`` is ``vmap`` over N Jacobian-vector products; through ``x @ W`` vmap
emits ``bmm`` with one operand broadcast over the tangents (stride 0). ``fold`` rewrites each
such ``bmm`` into one ``mm`` with the tangent batch folded into the other operand's rows or
columns. ``traced`` first traces f alone with fake tensors, so that a function branching on
values (or ``.item()``) is refused, never traced down one branch; the Jacobian's own graph
is then traced on real tensors (fake tensors fail inside forward AD).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable

import torch
from torch import fx

from jacbench.core import torch_internals

aten = torch.ops.aten
# On CPU a product (M, k) x (k, n) with n <= 8 columns runs slower than its transpose
# (n, k) x (k, M) in MKL/OpenBLAS (scripts/narrow_products.py); on CPU only.
NARROW = 8
MIN_ELEMENTS = 4096


class ValueDependent(ValueError):
    """f has no one graph for all points of a shape: it branches on values, or makes a
    result whose size depends on them."""


def traced(fn: Callable, f: Callable | None, *inputs: torch.Tensor) -> fx.GraphModule:
    """``fn`` (a transform of ``f``) as an aten graph, once ``f`` is shown to hold one graph
    for every point of ``x``'s shape: no Python branching on values (the fake trace; None:
    shown already), no operation whose output size depends on values (boolean masks,
    nonzero, unique)."""
    if f is not None:
        try:
            torch_internals.trace_shapes_only(f, inputs[0])
        except Exception as exc:
            raise ValueDependent(f"{type(exc).__name__}: {exc}") from exc
    graph = torch_internals.aten_graph(fn, *inputs)
    for node in graph.graph.nodes:
        if _by_values(node):
            raise ValueDependent(
                f"{node.target} makes a result whose size (or value read as a number) depends "
                "on x's values: one graph traced at one point is wrong at another"
            )
    return graph


def _by_values(node: fx.Node) -> bool:
    """Whether ``node`` makes an output whose shape (or a Python number) depends on values:
    boolean indexing, nonzero, unique, masked_select, .item() and the like."""
    tags = getattr(node.target, "tags", ())
    if torch.Tag.data_dependent_output in tags:
        return True
    if torch.Tag.dynamic_output_shape not in tags:
        return False
    if node.target is aten.index.Tensor:  # integer indices keep their shape
        indices = node.args[1] if len(node.args) > 1 else []
        if not isinstance(indices, (list, tuple)):  # aten.index.Tensor takes a list
            return True
        return any(
            isinstance(i, fx.Node) and i.meta["val"].dtype in (torch.bool, torch.uint8)
            for i in indices
        )
    return True


def _broadcast(node: object) -> bool:
    """Whether ``node`` is a 3-D tensor repeated along its first dimension (stride 0)."""
    value = getattr(node, "meta", {}).get("val")
    return (
        isinstance(value, torch.Tensor)
        and value.dim() == 3
        and value.shape[0] > 1
        and value.stride(0) == 0
    )


def _folded_left(graph: fx.Graph, a: fx.Node, b: fx.Node, shape: tuple[int, ...]) -> fx.Node:
    """``bmm(a, b)`` with ``a`` broadcast: ``a[0] @ b`` as one (m, k) x (k, K*n) product."""
    batch, m, k, n = shape
    call = graph.call_function
    columns = call(aten.reshape.default, (call(aten.permute.default, (b, [1, 0, 2])), [k, -1]))
    out = call(aten.mm.default, (call(aten.select.int, (a, 0, 0)), columns))
    return call(aten.permute.default, (call(aten.reshape.default, (out, [m, batch, n])), [1, 0, 2]))


def _folded_right(graph: fx.Graph, a: fx.Node, b: fx.Node, shape: tuple[int, ...]) -> fx.Node:
    """``bmm(a, b)`` with ``b`` broadcast: ``a @ b[0]`` as one (K*m, k) x (k, n) product."""
    batch, m, k, n = shape
    call = graph.call_function
    rows = call(aten.reshape.default, (a, [batch * m, k]))
    out = call(aten.mm.default, (rows, call(aten.select.int, (b, 0, 0))))
    return call(aten.reshape.default, (out, [batch, m, n]))


def fold(gm: fx.GraphModule) -> int:
    """Rewrite, in place, each ``bmm`` with exactly one broadcast operand into one ``mm``;
    returns how many were folded."""
    graph, folded = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.bmm.default:
            continue
        a, b = node.args
        left, right = _broadcast(a), _broadcast(b)
        if left == right:
            continue
        batch, m, k = a.meta["val"].shape
        shape = (batch, m, k, b.meta["val"].shape[2])
        with graph.inserting_before(node):
            out = (_folded_left if left else _folded_right)(graph, a, b, shape)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        folded += 1
    graph.eliminate_dead_code()
    gm.recompile()
    return folded


def _narrow(a: torch.Tensor | None, out: torch.Tensor | None) -> bool:
    """Whether ``out = a @ b`` is narrow and large enough to pay for the copy back, and
    ``a`` is not a broadcast."""
    if a is None or out is None or 0 in a.stride():
        return False
    rows, columns = out.shape
    return columns <= NARROW < rows and a.numel() >= MIN_ELEMENTS


def transpose_narrow(gm: fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> int:
    """Rewrite, in place, each CPU product ``a @ b`` with at most ``NARROW`` columns and
    more rows as ``(b.T @ a.T).T`` (BLAS reads the transposes as they lie) and the narrow
    result copied back into the layout the graph's later views expect; returns how many.
    For graphs that go to the compiler: run eagerly it gains nothing."""
    if inputs[0].device.type != "cpu":
        return 0
    if not propagated(gm, inputs):  # an op without a fake kernel: no shapes to judge by
        return 0
    graph, rewritten, call = gm.graph, 0, gm.graph.call_function
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.mm.default:
            continue
        a, b = node.args
        if not _narrow(a.meta.get("val"), node.meta.get("val")):
            continue
        with graph.inserting_before(node):
            a_t = call(aten.permute.default, (a, [1, 0]))
            out_t = call(aten.mm.default, (call(aten.permute.default, (b, [1, 0])), a_t))
            out = call(aten.permute.default, (out_t, [1, 0]))
            product = call(aten.clone.default, (out,), {"memory_format": torch.contiguous_format})
        node.replace_all_uses_with(product)
        graph.erase_node(node)
        rewritten += 1
    gm.recompile()
    return rewritten


# aten views, by their schema: an output that aliases an input and writes nothing
def _is_view(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:  # an item of split's or unbind's list of views
        source = node.args[0]
        return isinstance(source, fx.Node) and _is_view(source)
    schema = torch_internals.op_schema(node.target)
    return (
        schema is not None
        and not schema.is_mutable
        and any(r.alias_info is not None for r in schema.returns)
    )


def _base(node: fx.Node) -> fx.Node:
    """The node whose storage ``node`` views (itself where it is no view)."""
    while _is_view(node) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def mutates(node: fx.Node) -> bool:
    """Whether ``node`` writes into one of its inputs (``fill_``, ``copy_``, ``add_``...)."""
    schema = torch_internals.op_schema(node.target)
    return node.op == "call_function" and schema is not None and schema.is_mutable


VIEWS = {aten.view.default, torch_internals.UNSAFE_VIEW}
RESHAPED = "jacbench_reshaped"  # a view a pass's layout made a reshape
# Operations that read their input's memory by explicit strides and offset: after a pass that
# changed a layout they would read the wrong elements without failing
BY_STRIDES = {
    aten.as_strided.default,
    aten.as_strided_.default,
    aten.as_strided_scatter.default,
    torch_internals.RESHAPE_ALIAS,
}


class _Layouts(fx.Interpreter):
    """Fake tensors through a graph; a ``view`` that the strides before it no longer allow
    (a pass changed a layout) becomes a ``reshape`` (a copy there, a view wherever a view
    is possible). Each node's ``meta["val"]`` is set to what it computes now."""

    def __init__(self, gm: fx.GraphModule, mode: contextlib.AbstractContextManager) -> None:
        super().__init__(gm)
        self.mode = mode

    def run_node(self, n: fx.Node) -> object:
        with self.mode:
            try:
                out = super().run_node(n)
            except (RuntimeError, ValueError):  # fake kernels raise either for a view
                if n.target not in VIEWS:
                    raise
                n.target = aten.reshape.default
                n.meta[RESHAPED] = True
                out = super().run_node(n)
        n.meta["val"] = out
        return out


def propagated(gm: fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> bool:
    """Whether fake tensors go through the graph at ``inputs`` (each node's ``meta["val"]`` set),
    views the layouts no longer allow made reshapes (marked ``RESHAPED``)."""
    with torch_internals.fake_mode() as mode:
        try:
            _Layouts(gm, mode).run(*(torch_internals.fake_tensor(mode, t) for t in inputs))
        except Exception:
            return False
    return True


def valid(gm: fx.GraphModule, inputs: tuple[torch.Tensor, ...], before: set[str]) -> bool:
    """Whether a graph that passes rewrote (its nodes before them named in ``before``) still
    computes what it did, for any strides of the rewritten values: each node runs (a view
    the new layouts do not allow becomes a reshape, unless something writes through it or
    its base later: a copy would not see the write), and no rewritten value reaches an
    operation that reads memory by explicit strides."""
    if not propagated(gm, inputs):
        return False
    nodes = list(gm.graph.nodes)
    reshaped = [n for n in nodes if n.meta.get(RESHAPED)]
    changed = {n for n in nodes if n.name not in before}
    for node in nodes:  # what the rewritten values reach
        if any(arg in changed for arg in node.all_input_nodes):
            changed.add(node)
    if any(n.target in BY_STRIDES for n in changed):
        return False
    order = {n: i for i, n in enumerate(nodes)}
    for view in reshaped:
        bases = {_base(view), _base(view.args[0])}
        later = (n for n in nodes if order[n] > order[view] and mutates(n))
        if any(_base(arg) in bases for n in later for arg in n.all_input_nodes):
            return False
    return True


def copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A graph module with its own copy of the graph; its constants are the same objects
    (a constant updated in place is seen by both)."""
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return fx.GraphModule(gm, graph)


def fresh_outputs(gm: fx.GraphModule) -> int:
    """Make every output that is (a view of) a constant of the graph or its input a copy,
    so that no call returns the storage another call returns (a Jacobian that does not
    depend on x, hoisted, was one buffer shared by every call: one ``J *= w`` by a caller
    changed every later answer). Returns how many outputs were copied."""
    graph, copied = gm.graph, 0
    output = next(n for n in graph.nodes if n.op == "output")

    def fresh(arg: fx.node.Argument) -> fx.node.Argument:
        nonlocal copied
        if not isinstance(arg, fx.Node) or _base(arg).op not in ("get_attr", "placeholder"):
            return arg
        with graph.inserting_before(output):
            clone = graph.call_function(aten.clone.default, (arg,))
        clone.meta = dict(arg.meta)
        copied += 1
        return clone

    output.args = fx.node.map_aggregate(output.args, fresh)
    gm.recompile()
    return copied


def optimised(
    gm: fx.GraphModule, inputs: tuple[torch.Tensor, ...], passes: list[Callable]
) -> fx.GraphModule:
    """``gm`` with ``passes`` (each ``pass(graph, inputs)``) applied to a copy, kept valid for
    any strides (``valid``); ``gm`` unchanged where they cannot be. Either way every
    output is a new tensor at each call (``fresh_outputs``)."""
    before = {n.name for n in gm.graph.nodes}
    work = copy(gm)
    try:
        for run in passes:
            run(work, inputs)
        done = work if valid(work, inputs, before) else gm
    except Exception:  # a pass that cannot handle this graph: the graph as traced
        done = gm
    fresh_outputs(done)
    return done
