"""What a traced graph builds from shapes alone is computed once (jacbench.core.hoist), and
nothing that depends on the input, on randomness or on the order of writes is."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from jacbench.core.hoist import hoist

aten = torch.ops.aten


def targets(gm) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def test_jacfwds_tangent_basis_is_built_once_and_the_jacobian_is_unchanged():
    w = torch.randn(5, 3, dtype=torch.float64)
    jac = torch.func.jacfwd(lambda x: torch.tanh(w @ x))
    x = torch.randn(3, dtype=torch.float64)
    gm = make_fx(jac)(x)
    assert aten.new_zeros.default in targets(gm)  # the basis, built at every call
    assert hoist(gm) > 0
    assert aten.new_zeros.default not in targets(gm) and aten.fill_.Scalar not in targets(gm)
    for point in (x, torch.randn(3, dtype=torch.float64)):
        torch.testing.assert_close(gm(point), jac(point), rtol=0, atol=0)


def test_input_data_written_into_a_zeros_tensor_is_left_alone():
    def f(x):
        z = x.new_zeros(3)
        z.copy_(x)
        return z * 2

    gm = make_fx(f)(torch.zeros(3))
    assert hoist(gm) == 0
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), 2 * x)


def test_a_write_after_an_input_dependent_read_is_left_alone():
    def f(x):
        z = x.new_zeros(3)
        y = x + z
        z.fill_(1.0)
        return y * z

    gm = make_fx(f)(torch.zeros(3))
    assert hoist(gm) == 0
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), x)


def test_random_numbers_are_drawn_at_every_call():
    gm = make_fx(lambda x: x + torch.rand(3))(torch.zeros(3))
    hoist(gm)
    x = torch.zeros(3)
    assert not torch.equal(gm(x), gm(x))
