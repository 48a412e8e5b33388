"""The test harness's own guarantee: tests that compile run apart from the others, each test
file's together in a process of their own, and each takes its own outcome there."""

import os
from pathlib import Path

import pytest
import torch

from helpers.contract import compiles, frames_compiled
from jacbench.core.registry import load_registry
from own_processes import ISOLATED, OwnProcesses


@pytest.mark.compiles
def test_a_compiles_test_runs_in_a_fresh_process_of_its_own():
    assert os.environ.get(ISOLATED) == "1"
    assert frames_compiled() == 0  # nothing compiled in this process before this test
    compiled = torch.compile(lambda v: torch.sin(v) * 2, dynamic=False)
    x = torch.linspace(0, 1, 5)
    torch.testing.assert_close(compiled(x), torch.sin(x) * 2)


def test_other_tests_run_here():
    assert os.environ.get(ISOLATED) is None


def test_the_strategies_that_compile_are_known():
    assert compiles("jacfwd_compiled") and compiles("auto")
    assert not compiles("jacrev") and not compiles("fd_central")
    # its registry-wide cases run in the shared process
    assert not compiles("auto", load_registry().get("auto").test_options)


A_FILE = """
import os, pytest

def test_passes():
    open("pids", "a").write(f"{os.getpid()} {os.environ.get('JACBENCH_TEST_ISOLATED')}\\n")

def test_skips():
    open("pids", "a").write(f"{os.getpid()} {os.environ.get('JACBENCH_TEST_ISOLATED')}\\n")
    pytest.skip("no such device here")

def test_fails():
    assert 1 + 1 == 3, "arithmetic broke"

def test_crashes():
    os._exit(7)

def test_never_reached():
    pass
"""


def test_a_files_tests_share_one_process_and_each_keeps_its_outcome(tmp_path: Path):
    (tmp_path / "test_a.py").write_text(A_FILE)
    names = ["passes", "skips", "fails", "crashes", "never_reached"]
    nodeids = [f"test_a.py::test_{name}" for name in names]
    own = OwnProcesses(tmp_path, {"test_a.py": nodeids}, ["own_processes"], ahead=False)
    try:
        own.outcome(nodeids[0])  # passes: returns
        with pytest.raises(pytest.skip.Exception, match="no such device here"):
            own.outcome(nodeids[1])
        with pytest.raises(pytest.fail.Exception, match="arithmetic broke"):
            own.outcome(nodeids[2])
        for crashed in nodeids[3:]:  # the process died there: no outcome, and its exit status
            with pytest.raises(pytest.fail.Exception, match=r"no outcome: its process \(exit 7\)"):
                own.outcome(crashed)
        assert len(own.batches) == 1  # one process for the file
    finally:
        own.stop()
    lines = (tmp_path / "pids").read_text().splitlines()
    assert len(lines) == 2 and len(set(lines)) == 1  # both tests ran in one process
    pid, isolated = lines[0].split()
    assert isolated == "1" and int(pid) != os.getpid()  # apart from this one
