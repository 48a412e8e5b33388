"""Fixtures and hooks only (shared code is in tests/helpers/): the CLI in a scratch folder,
torch state checked after every test, and the tests that compile run apart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from helpers.cli import LAUNCH_FAST, Cli
from helpers.contract import compiles, frames_compiled
from own_processes import ISOLATED, PRELOAD, OwnProcesses

# auto's remembered decisions off (tests/test_decisions.py turns them on in a tmp folder):
# a decision remembered by one test would skip the calibration another test observes.
os.environ["JACBENCH_CACHE_DIR"] = ""


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
        "compiles: runs torch.compile, so it runs apart, with its file's other such tests, in a "
        "Python process of their own",
    )


@pytest.hookimpl(tryfirst=True)  # before -m selects, so 'not slow' sees the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Registry-wide tests: the cases of a strategy that compiles (with its declared
    test_options) are marked ``compiles``; every ``compiles`` test is also ``slow`` (seconds
    of compiling in a new interpreter)."""
    from jacbench.core.registry import load_registry

    registry = load_registry()
    compiling = {n for n, spec in registry.strategies.items() if compiles(n, spec.test_options)}
    for item in items:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("name")
        if isinstance(name, str) and name in compiling:
            item.add_marker(pytest.mark.compiles)
        if item.get_closest_marker("compiles") is not None:
            item.add_marker(pytest.mark.slow)


_OWN: list[OwnProcesses] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get(ISOLATED) or session.config.option.collectonly:
        return
    own = [item for item in session.items if item.get_closest_marker("compiles")]
    if own:
        files: dict[str, list[str]] = {}
        for item in own:
            files.setdefault(item.nodeid.partition("::")[0], []).append(item.nodeid)
        modules = sorted(
            {item.module.__name__ for item in own if isinstance(item, pytest.Function)}
        )
        ahead = "PYTEST_XDIST_WORKER" not in os.environ
        _OWN.append(OwnProcesses(session.config.rootpath, files, [*PRELOAD, *modules], ahead))


def pytest_sessionfinish() -> None:
    while _OWN:
        _OWN.pop().stop()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not _OWN or not _OWN[0].runs(pyfuncitem.nodeid):
        return None
    _OWN[0].outcome(pyfuncitem.nodeid)
    return True


@pytest.fixture(autouse=True)
def compiled_only_in_own_process(request: pytest.FixtureRequest):
    """Fail a test that ran torch.compile in the shared process without the mark."""
    before = frames_compiled()
    yield
    if not os.environ.get(ISOLATED) and frames_compiled() != before:
        pytest.fail(
            f"{request.node.nodeid} ran torch.compile in the shared test process: "
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

    def run(*args: str, mlflow: bool = False) -> tuple[int, list[str], str]:
        tracking = f"mlflow.enabled={str(mlflow).lower()}"  # MLflow on: sqlite in tmp_path
        proc = cli(*args, *LAUNCH_FAST, tracking)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("jacbench:")]
        return proc.returncode, lines, proc.stdout + proc.stderr

    return run
