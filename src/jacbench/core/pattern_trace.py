"""A Jacobian's sparsity pattern proved by tracing the program, not guessed at a point.

``f`` becomes an aten graph once (recorded by ``jacbench.core.dispatch_trace``, or traced by
``make_fx`` with fake tensors where that refuses), and each value's dependencies on the
inputs are propagated through it as a sparse boolean matrix. The rules are conservative: an
unknown op depends on everything its operands do, a comparison or index keeps both branches,
constants are evaluated (a banded weight gives a band). The pattern holds at every point; what
cannot be traced raises ``Unprovable`` with the reason, and the caller falls back to a dense
pattern, never a wrong sparse one.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
import torch

from jacbench.core import dispatch_trace
from jacbench.core.errors import one_line
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.torch_internals import (
    TO_COPY,
    UNSAFE_VIEW,
    trace_shapes_only,
    tree_leaves,
    tree_map,
)

# A conservative rule (every output element depends on all its operands' inputs) is refused
# beyond this many (element, input) pairs: the pattern is then dense for all practical purposes.
DENSE_PAIRS = 50_000_000
CPU = torch.device("cpu")
aten = torch.ops.aten


class Unprovable(Exception):
    """The pattern cannot be proved by tracing; the message says why."""


def _op_name(target: object) -> str:
    """An aten op's name (``sum``, ``norm``), the key of the rules; else the target's text."""
    return getattr(target, "_opname", str(target))


@dataclass(frozen=True)
class Dep:
    """A value that depends on the input: its shape and, per element (row-major), the inputs
    its derivative may involve (rows of a sparse (numel, N) boolean matrix)."""

    shape: tuple[int, ...]
    rows: sp.csr_array
    floating: bool = True  # False: a mask or index (or a value AD cannot differentiate)

    @property
    def numel(self) -> int:
        return _numel(self.shape)


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _each(value: Any, make: Callable[[Any], Any]) -> Any:
    """``make(value)``, or ``make`` of each item where ``value`` is an op's list of outputs."""
    if isinstance(value, (list, tuple)):
        return type(value)(make(v) for v in value)
    return make(value)


def _empty(shape: tuple[int, ...], n: int) -> Dep:
    """A value that varies with the input but carries no derivative (a mask, an index)."""
    return Dep(shape, sp.csr_array((_numel(shape), n), dtype=bool), floating=False)


def _select(rows: sp.csr_array, index: np.ndarray) -> sp.csr_array:
    """Rows ``index`` of ``rows``; -1 picks an empty row."""
    keep = index >= 0
    picked = sp.csr_array((len(index), rows.shape[1]), dtype=bool)
    if keep.all():
        return rows[index]
    if keep.any():
        picker = sp.csr_array(
            (np.ones(int(keep.sum()), dtype=bool), (np.flatnonzero(keep), index[keep])),
            shape=(len(index), rows.shape[0]),
        )
        picked = (picker @ rows).astype(bool)
    return picked


def _broadcast(dep: Dep, shape: tuple[int, ...]) -> sp.csr_array:
    if tuple(dep.shape) == tuple(shape):
        return dep.rows
    ids = torch.arange(dep.numel).reshape(dep.shape).broadcast_to(shape).reshape(-1)
    return _select(dep.rows, ids.numpy())


def _keep_rows(rows: sp.csr_array, keep: np.ndarray) -> sp.csr_array:
    """``rows`` where ``keep``, empty rows elsewhere; in int8, as scipy refuses a boolean
    product ("can't get common type")."""
    picked = sp.diags_array(keep.astype(np.int8), dtype=np.int8) @ sp.csr_array(rows, dtype=np.int8)
    return sp.csr_array(picked != 0)


def _union(parts: list[sp.csr_array], numel: int, n: int) -> sp.csr_array:
    if not parts:
        return sp.csr_array((numel, n), dtype=bool)
    total = sp.csr_array(parts[0], dtype=bool)
    for part in parts[1:]:  # boolean sums are unions
        total = total + sp.csr_array(part, dtype=bool)
    return total


def _any_row(rows: sp.csr_array) -> sp.csr_array:
    """One row: the inputs that any of ``rows`` depends on."""
    return sp.csr_array(np.asarray(rows.sum(axis=0)).reshape(1, -1) != 0)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _shape_of(value: Any) -> tuple[int, ...]:
    """A tensor's shape as ints; () for anything else (a Python number)."""
    return tuple(int(s) for s in value.shape) if isinstance(value, torch.Tensor) else ()


def _shape(node: torch.fx.Node) -> tuple[int, ...]:
    return _shape_of(_val(node))


def _is_floating(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() or value.is_complex()
    if isinstance(value, (list, tuple)):
        return any(_is_floating(v) for v in value)
    return isinstance(value, (float, torch.SymFloat))


class Traced(Protocol):
    """A traced graph: make_fx's GraphModule (constants as its attributes, read by get_attr
    nodes) or a ``dispatch_trace.Recording`` (constants in the nodes' arguments)."""

    @property
    def graph(self) -> torch.fx.Graph: ...


class Propagation:
    """The dependencies of every node of one traced graph."""

    def __init__(self, gm: Traced, n: int) -> None:
        self.gm, self.n = gm, n
        self.values: dict[torch.fx.Node, Any] = {}

    # -- value kinds --------------------------------------------------------------------
    def get(self, arg: Any) -> Any:
        """An argument's value; constants on the host, where the rules read their values
        (a CUDA model's buffers, a ``device=`` of a factory)."""
        if isinstance(arg, torch.fx.Node):
            return self.values[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self.get(a) for a in arg)
        if isinstance(arg, dict):
            return {k: self.get(v) for k, v in arg.items()}
        if isinstance(arg, torch.Tensor):
            return arg.cpu()
        return CPU if isinstance(arg, torch.device) else arg

    @staticmethod
    def _deps(args: Any) -> list[Dep]:
        flat = tree_leaves(args)
        return [a for a in flat if isinstance(a, Dep)]

    def run(self) -> Dep:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                shape = _shape(node)
                self.values[node] = Dep(shape, sp.identity(self.n, dtype=bool, format="csr"))
            elif node.op == "get_attr":
                self.values[node] = self.get(getattr(self.gm, node.target))
            elif node.op == "call_function":
                self.values[node] = self.call(node)
            elif node.op == "output":
                (out,) = node.args
                result = self.get(out)
                result = result[0] if isinstance(result, (list, tuple)) else result
                if isinstance(result, Dep):
                    return result
                return _empty(tuple(torch.as_tensor(result).shape), self.n)
        raise Unprovable("the traced graph has no output")

    # -- one node -------------------------------------------------------------------------
    def call(self, node: torch.fx.Node) -> Any:
        target = node.target
        if not callable(target):  # a call_function node holds the function itself
            raise Unprovable(f"node {node.name} calls {target!r}, which is not a function")
        args, kwargs = self.get(node.args), self.get(node.kwargs)
        deps = self._deps((args, kwargs))
        if target is operator.getitem:
            return args[0][args[1]]
        if not deps:  # constants only: evaluate them (the model's weights, masks, indices)
            return target(*args, **kwargs)
        floating = _is_floating(_val(node)) and any(d.floating for d in deps)
        if not floating or target in NO_DERIVATIVE:
            return self._no_derivative(node)
        name = _op_name(target)
        rule = RULES.get(name)
        if rule is not None:
            return rule(self, node, args, kwargs)
        if torch.Tag.pointwise in getattr(target, "tags", ()):
            return self._pointwise(node, args)
        if name.endswith("_like") or name.startswith("new_"):
            return self._fresh(node, args, kwargs)
        return self._moved(node, args, kwargs) or self._dense(node, deps)

    def _no_derivative(self, node: torch.fx.Node) -> Any:
        """Integer and boolean values (masks, indices) carry no derivative; their values may
        depend on the input, which the rules of their users take into account."""
        return _each(_val(node), lambda v: _empty(_shape_of(v), self.n))

    def _fresh(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        """A new tensor shaped like its operand (``zeros_like``, ``new_ones``, ``empty_like``):
        its values never depend on the operand's. Those set by value (zeros, ones, full) are
        evaluated as constants, so that later rules see their zeros (the 0 and 1 entries of a
        rotation matrix built with ``stack``); the others (empty, random) depend on no input
        but their values are unknown."""
        value = _val(node)
        if not isinstance(value, torch.Tensor):
            return self._no_derivative(node)
        varying = self._deps((args[1:], kwargs))  # a fill value computed from the input
        if varying:
            return self._dense(node, varying)
        if node.target in VALUE_SET:

            def placeholder(arg: Any) -> Any:
                return torch.zeros(arg.shape, dtype=value.dtype) if isinstance(arg, Dep) else arg

            return node.target(*tree_map(placeholder, args), **kwargs)
        shape = _shape_of(value)
        return Dep(shape, _empty(shape, self.n).rows, floating=_is_floating(value))

    def _dense(self, node: torch.fx.Node, deps: list[Dep]) -> Any:
        """The conservative rule: every output element depends on all the operands do."""
        union = _union([_any_row(d.rows) for d in deps], 1, self.n)

        def spread(shape: tuple[int, ...], floating: bool = True) -> Dep:
            if not floating:
                return _empty(shape, self.n)
            numel = _numel(shape)
            if numel * union.nnz > DENSE_PAIRS:
                target = getattr(node.target, "_opname", node.target)
                raise Unprovable(f"{target} makes {numel} x {union.nnz} entries depend on all")
            return Dep(shape, _select(union, np.zeros(numel, dtype=np.int64)))

        return _each(_val(node), lambda v: spread(_shape_of(v), _is_floating(v)))

    def _pointwise(self, node: torch.fx.Node, args: tuple) -> Dep:
        shape = _shape(node)
        parts = [_broadcast(a, shape) for a in args if isinstance(a, Dep)]
        rows = _union(parts, _numel(shape), self.n)
        if node.target == aten.mul.Tensor:  # a constant zero factor folds its product away
            for other in args:
                if isinstance(other, torch.Tensor) and other.is_floating_point():
                    zero = (other == 0).broadcast_to(shape).reshape(-1).numpy()
                    if zero.any():
                        rows = _keep_rows(rows, ~zero)
        return Dep(shape, sp.csr_array(rows, dtype=bool))

    def _moved(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        """Ops that only move elements (views, slices, cat, pad, index with constant
        indices, scatter of one value into another): each operand is replaced by the ids of
        its elements, the op run on the ids, and each output element takes the dependencies
        of the element whose id it holds. None where this does not apply."""
        if node.target not in MOVES:
            return None
        if any(not d.floating for d in self._deps((args, kwargs))):
            return None  # an index or mask that varies: followed only at the traced point
        offsets: list[Dep] = []

        def ids(value: Any) -> Any:
            if isinstance(value, Dep):
                start = sum(d.numel for d in offsets) + 1
                offsets.append(value)
                numbers = torch.arange(start, start + value.numel, dtype=torch.float64)
                return numbers.reshape(value.shape)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return torch.zeros(value.shape, dtype=torch.float64)
            if isinstance(value, float):
                return 0.0
            return value

        moved = node.target(*tree_map(ids, args), **kwargs)
        stacked = sp.vstack([sp.csr_array((1, self.n), dtype=bool), *[d.rows for d in offsets]])
        stacked = sp.csr_array(stacked, dtype=bool)

        def back(out: torch.Tensor) -> Dep:
            index = out.reshape(-1).to(torch.float64).numpy()
            if not np.array_equal(index, np.round(index)) or (index < 0).any():
                raise Unprovable(f"{node.target} did not move whole elements")
            return Dep(tuple(out.shape), _select(stacked, index.astype(np.int64)))

        return _each(moved, back)


def _mm(prop: Propagation, a: Any, b: Any, m: int, k: int, p: int) -> sp.csr_array:
    """Rows of C = A @ B, (m, k) x (k, p): C[i, j] depends on A[i, l] where B[l, j] may be
    nonzero and on B[l, j] where A[i, l] may be nonzero (a constant's zeros fold away)."""

    def maybe_nonzero(value: Any, shape: tuple[int, int]) -> sp.csr_array:
        if isinstance(value, torch.Tensor):
            return sp.csr_array((value.reshape(shape) != 0).numpy())
        return sp.csr_array(np.ones(shape, dtype=bool))

    parts = []
    if isinstance(a, Dep):
        pick = sp.kron(sp.identity(m, dtype=bool), maybe_nonzero(b, (k, p)).T, format="csr")
        parts.append(pick.astype(np.int32) @ a.rows.astype(np.int32))
    if isinstance(b, Dep):
        pick = sp.kron(maybe_nonzero(a, (m, k)), sp.identity(p, dtype=bool), format="csr")
        parts.append(pick.astype(np.int32) @ b.rows.astype(np.int32))
    return _union([sp.csr_array(x != 0) for x in parts], m * p, prop.n)


ADDED = {aten.addmm.default, aten.baddbmm.default, aten.addmv.default}


def _matmul_rule(prop: Propagation, node: torch.fx.Node, args: tuple, kwargs: dict) -> Dep:
    """mm, bmm, mv, dot, and the addmm family: one ``_mm`` per batch, plus the added term."""
    added, (a, b) = (args[0], args[1:3]) if node.target in ADDED else (None, args[:2])
    shape_a = a.shape if isinstance(a, Dep) else tuple(a.shape)
    shape_b = b.shape if isinstance(b, Dep) else tuple(b.shape)
    batches = shape_a[0] if len(shape_a) == 3 else 1
    m = shape_a[-2] if len(shape_a) > 1 else 1
    k = shape_a[-1]
    p = shape_b[-1] if len(shape_b) > 1 else 1
    blocks = []
    for i in range(batches):

        def part(value: Any, size: int, i: int = i) -> Any:
            if batches == 1:
                return value
            if isinstance(value, Dep):
                return Dep(value.shape[1:], value.rows[i * size : (i + 1) * size])
            return value[i]

        blocks.append(_mm(prop, part(a, m * k), part(b, k * p), m, k, p))
    rows = sp.csr_array(sp.vstack(blocks), dtype=bool)
    shape = _shape(node)
    if isinstance(added, Dep):
        rows = _union([rows, _broadcast(added, shape)], rows.shape[0], prop.n)
    return Dep(shape, rows)


def _reduced_dims(node: torch.fx.Node, args: tuple) -> list[int]:
    """The dims an along-dims op combines: its ``dim`` argument, or all of them."""
    source = args[0]
    ndim = len(source.shape)
    position = DIM_POSITION.get(_op_name(node.target), 1)
    dims = node.kwargs.get("dim", args[position] if len(args) > position else None)
    if isinstance(dims, int):
        dims = [dims]
    listed = list(dims) if isinstance(dims, (list, tuple)) else []
    ints = [d for d in listed if isinstance(d, int)]
    if not ints or not ndim or len(ints) != len(listed):
        return list(range(ndim))  # all of them: never fewer than the op combines
    return [d % ndim for d in ints]


def _slices(source: Dep, dims: list[int]) -> tuple[sp.csr_array, np.ndarray]:
    """(the inputs each slice along ``dims`` depends on, the slice of each element)."""
    group_shape = [1 if d in dims else s for d, s in enumerate(source.shape)]
    groups = torch.arange(_numel(tuple(group_shape))).reshape(group_shape)
    group_of = groups.broadcast_to(source.shape).reshape(-1).numpy()
    gather = sp.csr_array(
        (np.ones(len(group_of), dtype=bool), (group_of, np.arange(len(group_of)))),
        shape=(int(groups.numel()), len(group_of)),
    )
    per_group = sp.csr_array((gather.astype(np.int32) @ source.rows.astype(np.int32)) != 0)
    return per_group, group_of


def _along_dims_rule(prop: Propagation, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
    """Reductions (sum, mean, amax, prod, norm, logsumexp, var) and ops along a dim (softmax,
    cumsum, sort): every output element depends on its whole slice along the dims."""
    source = args[0]
    if not isinstance(source, Dep):
        return prop._dense(node, Propagation._deps(args))
    per_group, group_of = _slices(source, _reduced_dims(node, args))

    def shaped(out: Any) -> Dep:
        shape = _shape_of(out)
        if not out.is_floating_point():
            return _empty(shape, prop.n)
        if _numel(shape) == per_group.shape[0]:  # a reduction: one output per slice
            return Dep(shape, per_group)
        if shape == tuple(source.shape):  # along the dim, same shape (softmax, cumsum, sort)
            return Dep(shape, _select(per_group, group_of))
        return prop._dense(node, [source])

    return _each(_val(node), shaped)


def _cross_rule(prop: Propagation, node: torch.fx.Node, args: tuple, kwargs: dict) -> Dep:
    """linalg_cross(a, b, dim): each component depends on the other operand's and its own
    slice along ``dim`` (all three components, conservatively)."""
    shape = _shape(node)
    dim = kwargs.get("dim", args[2] if len(args) > 2 else -1) % len(shape)
    parts = []
    for operand in args[:2]:
        if isinstance(operand, Dep):
            full = Dep(shape, _broadcast(operand, shape))
            per_group, group_of = _slices(full, [dim])
            parts.append(_select(per_group, group_of))
    return Dep(shape, _union(parts, _numel(shape), prop.n))


def _where_rule(prop: Propagation, node: torch.fx.Node, args: tuple, kwargs: dict) -> Dep:
    """where(cond, a, b): a constant condition selects; a varying one keeps both branches."""
    cond, a, b = args
    shape = _shape(node)
    parts = {key: _broadcast(v, shape) for key, v in (("a", a), ("b", b)) if isinstance(v, Dep)}
    if isinstance(cond, torch.Tensor):
        chosen = cond.broadcast_to(shape).reshape(-1).numpy()
        mask = {"a": chosen, "b": ~chosen}
        parts = {key: _keep_rows(rows, mask[key]) for key, rows in parts.items()}
    return Dep(shape, _union(list(parts.values()), _numel(shape), prop.n))


def _scalar_rule(prop: Propagation, node: torch.fx.Node, args: tuple, kwargs: dict) -> Dep:
    """``.item()`` inside the trace: a Python number that depends on the whole operand."""
    (source,) = args[:1]
    return Dep((), _any_row(source.rows), source.floating)


ALONG_DIMS = [
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "logsumexp",
    "var",
    "std",
    "norm",
    "linalg_vector_norm",
    "_softmax",
    "_log_softmax",
    "softmax",
    "log_softmax",
    "cumsum",
    "cumprod",
    "sort",
    "var_mean",
    "median",
]
DIM_POSITION = {"norm": 2, "linalg_vector_norm": 2}  # where the dims are, if not argument 1
RULES: dict[str, Callable[..., Any]] = {
    **dict.fromkeys(ALONG_DIMS, _along_dims_rule),
    "mm": _matmul_rule,
    "bmm": _matmul_rule,
    "addmm": _matmul_rule,
    "baddbmm": _matmul_rule,
    "mv": _matmul_rule,
    "addmv": _matmul_rule,
    "dot": _matmul_rule,
    "where": _where_rule,
    "linalg_cross": _cross_rule,
    "_local_scalar_dense": _scalar_rule,
}
# new tensors whose values are set from the arguments other than the tensor they are like
VALUE_SET = {
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.full_like.default,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_full.default,
}
# ops whose output carries no derivative of their input (AD sees none through detach)
NO_DERIVATIVE = {aten.argmax.default, aten.argmin.default, aten.sign.default, aten.detach.default}
MOVES = {
    aten.view_copy.default,
    UNSAFE_VIEW,
    aten.view.default,
    aten.reshape.default,
    aten.permute_copy.default,
    aten.t_copy.default,
    aten.t.default,
    aten.transpose_copy.int,
    aten.expand_copy.default,
    aten.expand.default,
    aten.permute.default,
    aten.transpose.int,
    aten.select.int,
    aten.slice.Tensor,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
    aten.alias.default,
    aten.diagonal.default,
    aten.slice_copy.Tensor,
    aten.select_copy.int,
    aten.squeeze_copy.dim,
    aten.squeeze_copy.dims,
    aten.squeeze_copy.default,
    aten.unsqueeze_copy.default,
    aten.clone.default,
    aten.alias_copy.default,
    aten.cat.default,
    aten.stack.default,
    aten.flip.default,
    aten.roll.default,
    aten.repeat.default,
    aten.constant_pad_nd.default,
    aten.diagonal_copy.default,
    aten.unfold_copy.default,
    aten.split_copy.Tensor,
    aten.split_with_sizes_copy.default,
    aten.unbind_copy.int,
    TO_COPY,
    aten.lift_fresh_copy.default,
    aten.copy.default,
    aten.slice_scatter.default,
    aten.select_scatter.default,
    aten.diagonal_scatter.default,
    aten.index_select.default,
    aten.gather.default,
    aten.index.Tensor,
    aten.masked_fill.Scalar,
    aten.narrow_copy.default,
    aten.as_strided_copy.default,
    aten.tril.default,
    aten.triu.default,
    # views as f runs them (a recording, jacbench.core.dispatch_trace); make_fx's
    # functionalised graph has their _copy forms above
    aten.unbind.int,
    aten.split.Tensor,
    aten.split_with_sizes.default,
    aten.squeeze.default,
    aten.unfold.default,
    aten.as_strided.default,
    aten.narrow.default,
    aten.swapaxes.default,
    aten.movedim.int,
}


class Tracer(str, Enum):
    """How f becomes the aten graph the rules read."""

    AUTO = "auto"  # recorded on a meta x; make_fx where recording refuses (the default)
    DISPATCH = "dispatch"  # recorded only (jacbench.core.dispatch_trace): refusals raise
    MAKE_FX = "make_fx"  # make_fx only: imports torch._dynamo and sympy on first use


def trace(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.fx.GraphModule:
    """``f`` as an aten graph without mutations or views, traced with fake tensors so that
    nothing is specialised to the values of ``x`` (Python control flow on values fails)."""

    def call(v: torch.Tensor) -> torch.Tensor:  # a bound method or module, as one argument
        return f(v)

    functional = torch.func.functionalize(call, remove="mutations_and_views")
    try:
        return trace_shapes_only(functional, x)
    except Exception as exc:
        why = one_line(exc, 200)
        raise Unprovable(
            f"f cannot be traced without its values ({type(exc).__name__}: {why})"
        ) from None


def _propagated(graph: Traced, n: int) -> Dep:
    """The output's dependencies; ``Unprovable`` where the graph cannot be followed."""
    try:
        return Propagation(graph, n).run()
    except Unprovable:
        raise
    except Exception as exc:  # e.g. nonzero()/unique(): a size known only from values
        raise_if_interrupt(exc)
        why = one_line(exc, 200)
        raise Unprovable(
            f"the traced graph cannot be followed ({type(exc).__name__}: {why})"
        ) from None


def _dependencies(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, tracer: Tracer
) -> Dep:
    """The output's dependencies from the graph ``tracer`` gives: a recording where it can
    be made and followed (no compiler imported), else make_fx's graph (``Tracer.AUTO``)."""
    n = x.numel()
    if tracer is not Tracer.MAKE_FX:
        try:
            return _propagated(dispatch_trace.record(f, x), n)
        except (dispatch_trace.Refused, Unprovable) as exc:
            if tracer is Tracer.DISPATCH:
                raise Unprovable(f"f cannot be recorded ({exc})") from None
    return _propagated(trace(f, x), n)


def traced_pattern(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    n_out: int,
    tracer: Tracer = Tracer.AUTO,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of every entry of the (n_out, N) Jacobian of ``f`` that may be nonzero at
    some point of ``x``'s shape; ``Unprovable`` where tracing cannot show it."""
    with torch.no_grad():
        out = _dependencies(f, x.detach(), Tracer(tracer))
    if out.numel != n_out:
        raise Unprovable(f"the traced output has {out.numel} elements, expected {n_out}")
    coo = out.rows.tocoo()
    return np.asarray(coo.row, dtype=np.int64), np.asarray(coo.col, dtype=np.int64)
