"""The command's garbage collector (``jacbench.run.collector``): off while it starts, on
while a job measures (as in a user's process), off while a single run records, and what the
command made frozen at its end; left alone when jacbench's ``main`` is called from Python."""

from __future__ import annotations

import gc
import sys

import pytest

from helpers.cli import LAUNCH_FAST
from jacbench.run import app, runner
from jacbench.run.collector import Collector


@pytest.fixture
def collector_restored():
    yield
    gc.unfreeze()
    gc.enable()


def watch_collector(monkeypatch) -> dict[str, bool]:
    """Whether the collector is on when the job measures and when its row is written."""
    seen: dict[str, bool] = {}
    execute, write_row = runner.execute, app.write_row

    def measuring(*args, **kwargs):
        seen["measuring"] = gc.isenabled()
        return execute(*args, **kwargs)

    def writing(*args, **kwargs):
        seen["recording"] = gc.isenabled()
        return write_row(*args, **kwargs)

    monkeypatch.setattr(runner, "execute", measuring)
    monkeypatch.setattr(app, "write_row", writing)
    return seen


def test_the_command_measures_with_the_collector_on_and_records_with_it_off(
    tmp_path, monkeypatch, collector_restored
):
    seen = watch_collector(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["jacbench", *LAUNCH_FAST, "mlflow.enabled=false"])
    collector = Collector.off_for_start_up()
    assert collector.managed and not gc.isenabled()
    frozen = gc.get_freeze_count()
    app.main(collector)
    assert seen == {"measuring": True, "recording": False}
    assert gc.get_freeze_count() > frozen  # start-up's objects: never walked again
    made = [[] for _ in range(1000)]  # what the command made after start-up
    before = gc.get_freeze_count()
    collector.end()
    assert gc.get_freeze_count() >= before + len(made)  # left to the OS, not to teardown


def test_main_called_from_python_leaves_the_collector_as_it_was(cli, monkeypatch):
    seen = watch_collector(monkeypatch)
    gc.disable()
    try:
        cli(*LAUNCH_FAST, "mlflow.enabled=false")
        assert seen == {"measuring": False, "recording": False} and not gc.isenabled()
    finally:
        gc.enable()
    cli(*LAUNCH_FAST, "mlflow.enabled=false")
    assert seen == {"measuring": True, "recording": True}


def test_a_collector_the_caller_turned_off_is_theirs():
    gc.disable()
    try:
        collector = Collector.off_for_start_up()
        collector.start_work()
        assert not collector.managed and not gc.isenabled()
    finally:
        gc.enable()
