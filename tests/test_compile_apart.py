"""The harness's own guarantee: tests that run torch.compile run apart from the others (a
session runs them only if it runs nothing else), a plain run skips them
with the command that runs them, and a test that compiles without the mark fails."""

import shutil
from pathlib import Path

import pytest

from helpers.contract import compiles

HERE = Path(__file__).parent

COMPILING = """
import pytest
import torch


def twice(v):
    return torch.compile(lambda t: t * 2, dynamic=False)(v)


@pytest.mark.compiles
def test_marked():
    assert twice(torch.ones(2)).sum() == 4


def test_plain():
    assert torch.ones(2).sum() == 2
"""
UNMARKED = """
import torch


def test_unmarked():
    assert torch.compile(lambda t: t + 1, dynamic=False)(torch.zeros(1)).item() == 1
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A folder with jacbench's own conftest and helpers and two test files."""
    shutil.copy(HERE / "conftest.py", pytester.path)
    shutil.copytree(HERE / "helpers", pytester.path / "helpers")
    pytester.makepyfile(test_a=COMPILING, test_b=UNMARKED)
    return pytester


@pytest.mark.slow  # two pytest processes, both compiling: ~15 s
def test_compiling_tests_run_only_apart_and_an_unmarked_one_fails(project):
    mixed = project.runpytest_subprocess("-rs")
    mixed.assert_outcomes(passed=2, skipped=1, errors=1)  # the unmarked one errs at teardown
    mixed.stdout.fnmatch_lines(["*compiles: runs apart (pytest -m compiles test_a.py*"])
    mixed.stdout.fnmatch_lines(["*test_unmarked ran torch.compile among the other tests*"])

    apart = project.runpytest_subprocess("-m", "compiles", "test_a.py")
    apart.assert_outcomes(passed=1)  # compiled in a process of its own


def test_the_strategies_that_compile_are_known():
    assert compiles("jacfwd_compiled") and compiles("auto")
    assert not compiles("jacrev") and not compiles("fd_central")
    assert not compiles("auto", {"compile": False})
