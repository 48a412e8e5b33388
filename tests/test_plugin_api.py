"""The plugin API: what an outside strategy imports from ``jacbench`` itself."""

from __future__ import annotations

import pytest
import torch

import jacbench
from jacbench.core import enums, errors, prepared, problem, strategy

API = {
    "strategy": strategy.strategy,
    "Kind": enums.Kind,
    "Mode": enums.Mode,
    "StrategySkip": errors.StrategySkip,
    "Declared": prepared.Declared,
    "PrepInfo": prepared.PrepInfo,
    "Problem": problem.Problem,
}


@pytest.mark.parametrize("name", sorted(API))
def test_the_plugin_api_is_exported_by_jacbench(name):
    assert name in jacbench.__all__
    assert getattr(jacbench, name) is API[name]


def test_a_strategy_written_against_the_api_is_right():
    from jacbench import Kind, Mode, strategy

    @strategy(Kind.EXACT, Mode.REVERSE)
    def rows(problem, opts):
        """jacrev, as a plugin would write it."""
        return torch.func.jacrev(problem.f)

    f = torch.nn.Tanh()
    x = torch.randn(4, dtype=torch.float64)
    made = problem.make_problem("tanh", f, x, "input", False)
    jac = rows.prepare(made)(x)
    assert torch.allclose(jac, torch.diag(1 - torch.tanh(x) ** 2))
