"""The test harness's own guarantee: a test that compiles runs in a process of its own."""

import os

import pytest
import torch

from conftest import CONTRACT_OPTIONS, ISOLATED, _frames_compiled, compiles


@pytest.mark.compiles
def test_a_compiles_test_runs_in_a_fresh_process_of_its_own():
    assert os.environ.get(ISOLATED) == "1"
    assert _frames_compiled() == 0  # nothing compiled in this process before this test
    compiled = torch.compile(lambda v: torch.sin(v) * 2, dynamic=False)
    x = torch.linspace(0, 1, 5)
    torch.testing.assert_close(compiled(x), torch.sin(x) * 2)


def test_other_tests_run_here():
    assert os.environ.get(ISOLATED) is None


def test_the_strategies_that_compile_are_known():
    assert compiles("jacfwd_compiled") and compiles("auto")
    assert not compiles("jacrev") and not compiles("fd_central")
    assert not compiles("auto", CONTRACT_OPTIONS["auto"])  # its registry-wide cases run here
