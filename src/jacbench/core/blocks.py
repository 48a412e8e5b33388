"""Forward mode by blocks of x, where f reads x only through disjoint slices of it.

A Jacobian w.r.t. a flat parameter vector (``jacbench.FlatParams``, a least-squares fit's
theta) is the common case: f splits x into its tensors first. Forward mode over all N
tangents at once carries every tangent through every layer, also where it is zero (an
output layer's parameters' tangents through the hidden layers). By blocks, each slice's
tangents start where that slice is read, so they go only through what depends on it: the
Jacobian's columns of one slice at a time, from f's graph with the slices as its inputs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch import fx

from jacbench.core import torch_internals
from jacbench.core.fold import mutates

aten = torch.ops.aten
SPLITS = {aten.split_with_sizes.default, aten.split.Tensor}
MAX_BLOCKS = 64  # more slices than this: one block (each block is a pass of its own)


def spans(gm: fx.GraphModule, n: int, k: int = 0) -> list[tuple[int, int]] | None:
    """The (start, stop) of each slice of the flat input ``k`` that ``gm`` reads it through,
    in order and disjoint, where it reads it only through slices along its one dimension (a
    split, or slices with step 1); else None."""
    x = [node for node in gm.graph.nodes if node.op == "placeholder"][k]
    while len(x.users) == 1 and _as_it_is(next(iter(x.users)), n):
        (x,) = x.users
    out = []
    for user in x.users:
        args = list(user.args) + [None] * 4
        if user.target in SPLITS and args[0] is x and (args[2] or 0) == 0:
            sizes = args[1] if isinstance(args[1], (list, tuple)) else _equal(args[1], n)
            starts = [sum(sizes[:k]) for k in range(len(sizes))]
            used = {item.args[1] for item in user.users if item.target is operator.getitem}
            out += [(starts[k], starts[k] + sizes[k]) for k in sorted(used)]
        elif user.target is aten.slice.Tensor and args[0] is x and (args[1] or 0) == 0:
            start, stop, step = args[2] or 0, min(args[3] if args[3] is not None else n, n), args[4]
            if step not in (None, 1) or start < 0 or stop < 0:
                return None
            out.append((start, stop))
        else:
            return None
    out.sort()
    if any(a[1] > b[0] for a, b in zip(out[:-1], out[1:], strict=True)):  # overlapping slices
        return None
    return out


def _as_it_is(node: fx.Node, n: int) -> bool:
    """Whether ``node`` is its input unchanged: an alias, a view as the same (n,), or a copy
    (the library's copy of x for f) in a graph that writes into nothing."""
    if node.target is aten.alias.default:
        return True
    if node.target is aten.clone.default:
        return not any(mutates(other) for other in node.graph.nodes)
    if node.target not in (aten.view.default, aten.reshape.default):
        return False
    shape = node.args[1]
    return isinstance(shape, (list, tuple)) and list(shape) in ([n], [-1])


def _equal(size: int, n: int) -> list[int]:
    return [min(size, n - start) for start in range(0, n, size)]


def with_pieces(
    gm: fx.GraphModule, cuts: list[tuple[int, int]], n: int, k: int = 0
) -> fx.GraphModule:
    """``gm`` taking the slices ``cuts`` of its input ``k`` (of ``n`` values) as inputs of
    their own, after its other inputs (in their order)."""
    graph, env = fx.Graph(), {}
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    x = placeholders[k]
    for node in placeholders:
        if node is not x:
            env[node] = graph.placeholder(node.name)
    pieces = {cut: graph.placeholder(f"piece_{j}") for j, cut in enumerate(cuts)}
    aliases = {x}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.args and node.args[0] in aliases and _as_it_is(node, n):
            aliases.add(node)
            continue
        if node.target in SPLITS and node.args[0] in aliases:
            continue  # its items are the pieces
        if node.target is operator.getitem and node.args[0].target in SPLITS:
            split = node.args[0]
            if split.args[0] in aliases:
                sizes = split.args[1]
                sizes = sizes if isinstance(sizes, (list, tuple)) else None
                start = (
                    sum(sizes[: node.args[1]])
                    if sizes is not None
                    else node.args[1] * split.args[1]
                )
                env[node] = next(p for (a, _), p in pieces.items() if a == start)
                continue
        if node.target is aten.slice.Tensor and node.args[0] in aliases:
            start = node.args[2] if len(node.args) > 2 else 0
            env[node] = next(p for (a, _), p in pieces.items() if a == (start or 0))
            continue
        env[node] = graph.node_copy(node, lambda arg: env[arg])
    return fx.GraphModule(gm, graph)


def by_blocks(
    f: Callable,
    inputs: tuple[torch.Tensor, ...],
    k: int,
    jacobian: Callable[[Callable], Callable],
) -> Callable | None:
    """``(x, *others) -> (f(x), J(x))`` for ``f(*inputs)`` with x its input ``k`` (the others
    read as they are given), J computed one block of columns at a time by ``jacobian(g)``
    (``g -> (p -> (g(p), J_g(p)))``) of f as a function of one slice, the others fixed;
    None where f does not read x (flat) only through two or more disjoint slices."""
    x = inputs[k]
    if x.dim() != 1:
        return None
    gm = torch_internals.aten_graph(f, *inputs)
    cuts = spans(gm, x.numel(), k)
    if cuts is None or not 2 <= len(cuts) <= MAX_BLOCKS:
        return None
    n = x.numel()
    pieces = with_pieces(gm, cuts, n, k)

    def both(v: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [v[a:b] for a, b in cuts]
        value: torch.Tensor | None = None
        columns: list[torch.Tensor] = []
        at = 0
        for j, (start, stop) in enumerate(cuts):

            def g(p: torch.Tensor, j: int = j) -> torch.Tensor:
                return pieces.forward(*others, *parts[:j], p, *parts[j + 1 :])

            value, block = jacobian(g)(parts[j])
            block = block.reshape(value.numel(), stop - start)
            if start > at:  # columns of x that f does not read: zero
                columns.append(block.new_zeros(value.numel(), start - at))
            columns.append(block)
            at = stop
        if value is None:  # spans() returns at least two cuts
            raise RuntimeError("forward mode by blocks: no block of x was read")
        if at < n:
            columns.append(columns[-1].new_zeros(value.numel(), n - at))
        return value, torch.cat(columns, dim=1).reshape(*value.shape, n)

    return both
