"""The contract a plugin author runs (issue 28): ``python -m jacbench.check NAME`` on an
installed strategy, and the documented plugin recipe built as written, in a temporary folder,
then checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jacbench.check import main
from jacbench.core.strategy import Kind, Mode, strategy
from jacbench.testing import ContractError, right_at_two_points

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_check_passes_the_complex_step_plugin(capsys):
    assert main(["complex_step"]) == 0
    out = capsys.readouterr().out
    assert "complex_step right_at_two_points[mlp-params] passed" in out
    assert "right_at_two_points[mlp-batch3] skipped: " in out  # with the strategy's reason


def test_an_unknown_name_is_refused_with_the_registered_ones(capsys):
    assert main(["jacrev_chunkd"]) == 2
    assert "valid strategies: analytic, auto" in capsys.readouterr().err


def test_a_strategy_that_keeps_its_example_point_fails_the_contract():
    """The mistake the recipe warns of: a Jacobian computed once at problem.x."""
    import torch

    from jacbench.core.registry import Registry

    @strategy(Kind.EXACT, Mode.REVERSE)
    def remembers_x(problem, opts):
        jac = torch.func.jacrev(problem.f)(problem.x)
        return lambda x: jac

    registry = Registry(strategies={"remembers_x": remembers_x}, broken={})
    with pytest.raises(ContractError, match="remembers_x on mlp at a second point"):
        right_at_two_points("remembers_x", "mlp", registry)


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


@pytest.mark.slow  # builds a wheel (hatchling) and starts the command
def test_the_documented_plugin_recipe_builds_and_passes_the_check(tmp_path):
    text = (DOCS / "extending.md").read_text()
    module = next(b for b in _blocks(text, "python") if b.startswith("# my_pkg/strategies.py"))
    pyproject = next(b for b in _blocks(text, "toml") if "jacbench.strategies" in b)
    package = tmp_path / "src"
    (package / "my_pkg").mkdir(parents=True)
    assert "an empty `my_pkg/__init__.py`" in text  # hatchling builds no package without it
    (package / "my_pkg" / "__init__.py").write_text("")
    (package / "my_pkg" / "strategies.py").write_text(module)
    (package / "pyproject.toml").write_text(pyproject)
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), "."],
        cwd=package,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path[1:]])}
    check = subprocess.run(
        [sys.executable, "-m", "jacbench.check", "jacrev_chunked"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "jacrev_chunked right_at_two_points[mlp-params] passed" in check.stdout
