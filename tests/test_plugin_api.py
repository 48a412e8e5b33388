"""The plugin API: what an outside strategy imports from ``jacbench`` itself, and the module
paths of the earlier release, which still load with a DeprecationWarning."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

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


OLD_PLUGIN = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("error", DeprecationWarning)
    try:
        from jacbench.strategy import Kind, Mode, StrategySkip, strategy
    except DeprecationWarning as exc:
        print("warned:", exc)
    warnings.simplefilter("ignore", DeprecationWarning)
    from jacbench.strategy import Kind, Mode, StrategySkip, strategy
    from jacbench.problem import Problem
    import jacbench
    from jacbench import strategy as decorator  # the new import, after the old one

    @decorator(Kind.EXACT, Mode.FORWARD)
    def cols(problem: Problem, opts):
        import torch
        return torch.func.jacfwd(problem.f)

    print("spec:", type(cols).__name__, cols.name, cols.mode, StrategySkip.__name__)
    """
)


def test_the_old_plugin_import_path_works_with_a_warning():
    """In a fresh interpreter: the old module is imported before the decorator is read from
    jacbench, the order that would make ``jacbench.strategy`` the module."""
    out = subprocess.run(
        [sys.executable, "-c", OLD_PLUGIN], capture_output=True, text=True, check=True
    ).stdout
    assert "warned: jacbench.strategy is deprecated" in out
    assert "from jacbench import strategy" in out
    assert "spec: StrategySpec cols forward StrategySkip" in out


@pytest.mark.parametrize("old", ["strategy", "problem", "errors", "enums"])
def test_each_old_path_names_its_replacement(old):
    sys.modules.pop(f"jacbench.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"jacbench.{old} is deprecated") as caught:
        importlib.import_module(f"jacbench.{old}")
    assert caught[0].filename == __file__ or "importlib" in caught[0].filename


def test_the_old_problem_path_still_has_the_problem_builder():
    """Issue 45 moved the config-to-Problem builder to the benchmark side; plugin tests written
    against the earlier release import it from ``jacbench.problem`` (the complex-step plugin's
    did: ``from jacbench.problem import build_problem``)."""
    from jacbench.benchmark import problems

    sys.modules.pop("jacbench.problem", None)
    with pytest.warns(DeprecationWarning, match="jacbench.problem is deprecated"):
        old = importlib.import_module("jacbench.problem")
    assert old.build_problem is problems.build_problem and old.ModelKeys is problems.ModelKeys
    for name in ("Problem", "FunctionModule", "make_problem"):
        assert getattr(old, name) is getattr(problem, name)
