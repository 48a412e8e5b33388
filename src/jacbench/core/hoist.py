"""What a traced Jacobian graph builds from shapes alone, computed once.

jacfwd's graph builds its tangent basis (an identity matrix, from ``new_zeros`` and a
diagonal ``fill_``) and the slices and copies of it that each layer's products use at every
call. ``hoist`` evaluates, at trace time, every node that depends on no input and no module
tensor, and gives the graph the values its other nodes use as constants. A graph whose input
data would be written into such a tensor is left as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from jacbench.core.fold import mutates

aten = torch.ops.aten
# Factories that read only their first argument's dtype and device, never its values
METADATA_ONLY = {
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_empty.default,
    aten.new_full.default,
}


def _inputs(node: fx.Node) -> list[fx.Node]:
    inputs = node.all_input_nodes
    if node.target in METADATA_ONLY:
        return [n for n in inputs if n is not node.args[0]]
    return inputs


def _value(node: fx.Node, values: dict[fx.Node, object]) -> object:
    """The node run on the values of its inputs (a metadata-only factory on an empty tensor
    of its first argument's dtype and device)."""

    def real(arg: fx.Node) -> Any:  # a value (a tensor) where the graph has its node
        if arg in values:
            return values[arg]
        meta = arg.meta["val"]  # the first argument of a metadata-only factory
        return torch.empty(0, dtype=meta.dtype, device=meta.device)

    args = fx.node.map_arg(node.args, real)
    kwargs = fx.node.map_arg(node.kwargs, real)
    if not callable(node.target):  # a call_function node holds the function itself
        raise TypeError(f"node {node.name} calls {node.target!r}, which is not a function")
    return node.target(*args, **kwargs)


def hoist(gm: fx.GraphModule) -> int:
    """Replace, in place, the uses of input-free nodes by their values; returns how many
    constants the graph now holds. Nothing is changed (0) where input data would be written
    into an input-free tensor, or one is written after an input-dependent node read it."""
    graph, read = gm.graph, False
    values: dict[fx.Node, object] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        inputs = _inputs(node)
        seeded = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        if all(n in values for n in inputs) and not seeded:  # random numbers: drawn each call
            if mutates(node) and read:
                return 0  # written after a use: the use saw the tensor as it was before
            try:
                values[node] = _value(node, values)
                continue
            except Exception:
                if mutates(node):
                    return 0
        if any(n in values for n in inputs):
            if mutates(node):
                return 0  # input data written into a tensor built from shapes
            read = True
    used = [n for n in values if any(u not in values for u in n.users)]
    tensors = [v for v in (values[n] for n in used) if isinstance(v, torch.Tensor)]
    if len(tensors) != len(used):
        return 0
    for count, (node, tensor) in enumerate(zip(used, tensors, strict=True)):
        name = f"_hoisted_{count}"
        gm.register_buffer(name, tensor.clone(), persistent=False)
        with graph.inserting_before(node):
            constant = graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant, delete_user_cb=lambda user: user not in values)
    for node in reversed(list(values)):  # none of them is used outside themselves now
        graph.erase_node(node)
    gm.recompile()
    return len(used)
