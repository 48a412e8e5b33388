"""jacbench.jacobian: the library call on a user's own function or module."""

from __future__ import annotations

import pytest
import torch

import jacbench
from conftest import CONTRACT_OPTIONS
from jacbench.core.errors import ConfigError


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 5))


@pytest.mark.parametrize("strategy", ["auto", "jacrev", "jacfwd", "autograd_loop", "functional"])
def test_jacobian_of_a_module_matches_torch_func(strategy):
    model, x = net(), torch.randn(3)
    expected = torch.func.jacrev(model)(x)
    jac = jacbench.jacobian(model, x, strategy, **CONTRACT_OPTIONS.get(strategy, {}))
    assert jac.shape == (5, 3) and not jac.requires_grad
    assert torch.allclose(jac, expected, atol=1e-6)


def test_the_users_module_is_left_as_it_was():
    model = net().train()
    jacbench.jacobian(model, torch.randn(3), "jacrev")
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_shapes_follow_output_then_input_and_options_reach_the_strategy():
    x = torch.randn(2, 3, dtype=torch.float64)
    jac = jacbench.jacobian(lambda v: v.sin().sum(0), x, "fd_central", eps=1e-4)
    expected = torch.func.jacrev(lambda v: v.sin().sum(0))(x)
    assert jac.shape == (3, 2, 3)
    assert torch.allclose(jac, expected, atol=1e-8)
    coarse = jacbench.jacobian(lambda v: v.sin().sum(0), x, "fd_central", eps=1e-1)
    assert (coarse - expected).abs().max() > 100 * (jac - expected).abs().max()


def test_bad_strategy_or_option_is_refused_with_valid_names():
    with pytest.raises(ConfigError, match="valid strategies: .*jacrev"):
        jacbench.jacobian(torch.sin, torch.randn(3), "nosuch")
    with pytest.raises(ValueError, match="valid options"):
        jacbench.jacobian(torch.sin, torch.randn(3), "jacrev", chunksize=2)
