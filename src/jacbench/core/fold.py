"""Forward mode with its tangents folded into matrix products, as XLA does.

``torch.func.jacfwd`` is ``vmap`` over N Jacobian-vector products. Through a linear layer
``x @ W`` vmap's batching rule emits ``bmm`` with one operand broadcast over the N tangents
(stride 0): on seed004 ``(84,144,3) x (84,3,10)``, 338 us, where the same arithmetic as one
``mm (144,3) x (3,840)`` takes 65 us (issue 33). ``fold`` rewrites every such ``bmm`` of an
aten graph into one ``mm`` with the tangent batch folded into the other operand's rows or
columns. ``traced`` first traces f alone with fake tensors (shapes, no values): Python
branching on values, or ``.item()``, fails there, so such a function is refused, never traced
down one branch. The Jacobian's own graph is then traced on real tensors (torch 2.13's fake
tensors fail inside forward AD: "InferenceMode::is_enabled() && self.is_inference()").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

aten = torch.ops.aten
# On CPU a product (M, k) x (k, n) with n <= 8 columns runs 2.5-10x slower than its
# transpose (n, k) x (k, M) in MKL/OpenBLAS (scripts/narrow_products.py). Not measured on
# GPUs, so only done on CPU.
NARROW = 8
MIN_ELEMENTS = 4096


def traced(fn: Callable, f: Callable, x: torch.Tensor) -> fx.GraphModule:
    """``fn`` (a transform of ``f``) as an aten graph, once ``f`` is shown to hold one graph
    for every point of ``x``'s shape."""
    make_fx(f, tracing_mode="fake", _allow_non_fake_inputs=True)(x)
    return make_fx(fn)(x)


class Captured:
    """What a traced graph holds as constants, by identity: the module's parameters, buffers
    and submodules and, for a plain function, what its closure holds and the globals its code
    names. torch.compile(jacfwd(f)) guards on these and recompiles; a traced graph would go on
    with the old values, silently wrong after ``module.weight = nn.Parameter(...)`` or a
    rebound variable, so the graph is traced again when ``changed()`` (in-place updates, as
    optimisers make, are seen by the graph itself). Globals of functions that f calls are not
    followed (dynamo's guards would see them)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.fn = getattr(module, "fn", None)  # a plain function's wrapper holds it
        self.held = self._now()

    def _now(self) -> list[object]:
        """What is held now, read off the modules' own dicts: ``named_parameters`` builds
        every name and took 31 us of seed004's 450 us call."""
        held: list[object] = []
        modules = [self.module]
        while modules:
            module = modules.pop()
            held += module._parameters.values()
            held += module._buffers.values()
            held += module._modules.values()  # a replaced submodule
            modules += [m for m in module._modules.values() if m is not None]
        for cell in getattr(self.fn, "__closure__", None) or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:  # an empty cell
                held.append(None)
        code, namespace = getattr(self.fn, "__code__", None), getattr(self.fn, "__globals__", {})
        if code is not None:
            held += [namespace.get(name) for name in code.co_names]
        return held

    def changed(self) -> bool:
        now = self._now()
        if len(now) != len(self.held):
            return True
        return any(a is not b for a, b in zip(now, self.held, strict=True))


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
    """Whether ``out = a @ b`` is narrow and large enough to pay for the copy back (on
    seed004's small variant, 825 x 2 rows: 1.08-1.10x slower) and ``a`` is not a broadcast."""
    if a is None or out is None or 0 in a.stride():
        return False
    rows, columns = out.shape
    return columns <= NARROW < rows and a.numel() >= MIN_ELEMENTS


def transpose_narrow(gm: fx.GraphModule, x: torch.Tensor) -> int:
    """Rewrite, in place, each CPU product ``a @ b`` with at most ``NARROW`` columns and
    more rows as ``(b.T @ a.T).T`` (BLAS reads the transposes as they lie) and the narrow
    result copied back into the layout the graph's later views expect; returns how many.
    On seed004 vmap makes the output layer's tangents one (12096, 10) x (10, 4) product:
    the compiled call 0.67-0.80x. Run eagerly it measured 0.98-1.02x, so this is for graphs
    that go to the compiler."""
    if x.device.type != "cpu":
        return 0
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        FakeTensorProp(gm, mode).propagate(mode.from_tensor(x))
    except Exception:  # an op without a fake kernel: no shapes to judge by, graph left as is
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
