"""Fixtures and hooks only (shared code is in tests/helpers/): the CLI in a scratch folder,
torch state checked after every test, and the tests that compile kept apart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from helpers.cli import LAUNCH_FAST, Cli
from helpers.contract import compiles, frames_compiled
from helpers.order import heaviest_files_first

# auto's remembered decisions off (tests/test_decisions.py turns them on in a tmp folder):
# a decision remembered by one test would skip the calibration another test observes.
os.environ["JACBENCH_CACHE_DIR"] = ""

pytest_plugins = ["pytester"]  # tests/test_compile_apart.py runs pytest on a folder of its own


def torch_state() -> dict[str, object]:
    """The thread-local autograd state a test (or jacbench) could leave behind."""
    return {
        "inference mode": torch.is_inference_mode_enabled(),
        "grad enabled": torch.is_grad_enabled(),
        "functorch levels": torch._C._functorch.get_dynamic_layer_stack_depth(),
        "torch function modes": torch._C._len_torch_function_stack(),
    }


CLEAN_STATE = torch_state()


@pytest.fixture(autouse=True)
def torch_state_left_clean():
    """Fail the test that leaves autograd state behind, instead of every test after it."""
    yield
    left = {k: v for k, v in torch_state().items() if v != CLEAN_STATE[k]}
    if left:
        _LEAKED.append(torch.autograd.grad_mode._enter_inference_mode(False))
        torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(0)
        torch._C._set_grad_enabled(True)
        pytest.fail(f"the test left torch state behind: {left}")


_LEAKED: list[object] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compiles: runs torch.compile, so it runs apart: each file's such tests in a pytest "
        "process of their own (scripts/test.sh)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Before -m selects: mark what compiles. After: keep it apart from the other tests, and
    the heaviest files first."""
    mark_compiling(items)
    yield
    keep_apart(config, items)
    heaviest_files_first(items)


def mark_compiling(items: list[pytest.Item]) -> None:
    """Registry-wide tests: the cases of a strategy that compiles (with its declared
    test_options) are marked ``compiles``; every ``compiles`` test is also ``slow``."""
    from jacbench.core.registry import load_registry

    registry = load_registry()
    compiling = {n for n, spec in registry.strategies.items() if compiles(n, spec.test_options)}
    for item in items:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("name")
        if isinstance(name, str) and name in compiling:
            item.add_marker(pytest.mark.compiles)
        if item.get_closest_marker("compiles") is not None:
            item.add_marker(pytest.mark.slow)


# Tests that compile run apart: a session runs them only if they are all it runs
# (``pytest -m compiles FILE...``, as scripts/test.sh does: a file of many such tests in a
# process of its own, the files of a few together); anywhere else they are skipped with that
# command. Why: torch.compile leaves state behind in the process that later tests trip over
# (on cold caches torch 2.13 left inference mode, functorch levels or a dispatch guard
# entered, "Guard failed on the same frame it was created"; 2 of 29 failed in one shared
# process, torch._dynamo.reset() did not cure it), as PyTorch's own suite found and works
# around the same way (pytorch/pytorch#168925 moved its compile tests into processes of their
# own: "They are leaking state and breaking other tests"). Not one process per test: a
# process's first compile pays ~3-4 s of inductor start-up that its later compiles reuse.
# The files scripts/test.sh groups passed together three times in a row on cold caches.
# Remove this when ``JACBENCH_COMPILE_APART=0 pytest -n auto --dist loadfile`` (everything in
# shared processes) passes three times in a row on cold caches (an empty
# TORCHINDUCTOR_CACHE_DIR).
APART = "JACBENCH_COMPILE_APART"
IN_GROUP = pytest.StashKey[bool]()  # this session runs compiling tests, nothing else


def keep_apart(config: pytest.Config, items: list[pytest.Item]) -> None:
    files = {
        item: item.path.relative_to(config.rootpath)
        for item in items
        if item.get_closest_marker("compiles")
    }
    if not files or os.environ.get(APART) == "0":
        return
    if len(files) == len(items):
        config.stash[IN_GROUP] = True
        return
    for item, file in files.items():
        why = f"compiles: runs apart (pytest -m compiles {file}; scripts/test.sh runs them all)"
        item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(autouse=True)
def compiled_only_apart(request: pytest.FixtureRequest):
    """Fail a test that ran torch.compile among the other tests without the mark."""
    before = frames_compiled()
    yield
    apart = not request.config.stash.get(IN_GROUP, False) and os.environ.get(APART) != "0"
    if apart and frames_compiled() != before:
        pytest.fail(
            f"{request.node.nodeid} ran torch.compile among the other tests: "
            "mark it @pytest.mark.compiles",
            pytrace=False,
        )


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(tmp_path, monkeypatch)


@pytest.fixture
def launch(cli: Cli):
    """A fast ``python -m jacbench ARGS`` (quick timing, no memory, MLflow only if asked):
    (exit code, the ``jacbench:`` lines of stderr, everything printed)."""

    def run(*args: str, mlflow: bool = False, **options) -> tuple[int, list[str], str]:
        tracking = f"mlflow.enabled={str(mlflow).lower()}"  # MLflow on: sqlite in tmp_path
        proc = cli(*args, *LAUNCH_FAST, tracking, **options)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("jacbench:")]
        return proc.returncode, lines, proc.stdout + proc.stderr

    return run
