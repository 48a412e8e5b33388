"""The tracking helper of a single run (issue 29): MLflow (with pyarrow and pandas) imported
and its store opened in a second process while torch imports, the row written and the run
logged through it before the command returns, and the in-process path whenever the helper is
not there."""

from __future__ import annotations

import dataclasses
import errno
import subprocess
import sys

import pytest

from helpers.cli import QUICK, clean_env
from helpers.results import make_result
from helpers.tracking import half_made_db, sqlite_uri
from jacbench.record import tracker
from jacbench.record.mlflow_run import Tracking
from jacbench.record.parquet import read_results, write_result
from jacbench.run import app


def run_command(folder, *python_flags: str) -> subprocess.CompletedProcess:
    """``python -m jacbench timing=quick`` as a user types it: the helper is started."""
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "jacbench", *QUICK],
        cwd=folder,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_single_run_is_in_mlflow_when_the_command_returns(tmp_path):
    proc = run_command(tmp_path, "-X", "importtime")  # the helper's imports are not listed
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "torch" in imported
    assert not imported & {"pyarrow", "pandas", "mlflow"}  # left to the helper
    (log,) = tmp_path.glob("outputs/*/*/jacbench.log")
    assert "logged by the tracking helper" in log.read_text()  # not in the command's process
    (row,) = read_results(tmp_path / "results").to_dict("records")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(sqlite_uri(tmp_path)).get_run(row["mlflow_run_id"])  # read right away
    assert run.info.status == "FINISHED" and run.data.tags["jacbench.job_id"] == row["job_id"]
    assert run.data.metrics["time_median_ms"] > 0


def test_mlflows_error_in_the_helper_is_reported_as_in_process(tmp_path):
    half_made_db(tmp_path / "mlflow.db")
    proc = run_command(tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("jacbench:")]
    assert "MLflow tracking failed" in line and "BrokenTrackingDb: the MLflow database" in line
    assert len(read_results(tmp_path / "results")) == 1  # the row is kept


def test_a_helper_that_died_leaves_the_logging_to_the_run(tmp_path, monkeypatch):
    helper = tracker.Tracker()
    helper.proc.kill()
    helper.proc.wait()
    monkeypatch.setattr(tracker, "_STARTED", helper)
    tracking = Tracking.resolve(tmp_path, sqlite_uri(tmp_path), "jacbench")
    run_id = app.log_through_helper(make_result(job_id="f" * 16), tracking, "")
    assert tracker.started() is None  # given up
    from mlflow.tracking import MlflowClient

    assert MlflowClient(sqlite_uri(tmp_path)).get_run(run_id).info.status == "FINISHED"


def test_no_helper_where_nothing_is_measured_or_tracked(monkeypatch):
    started = []
    monkeypatch.setattr(tracker, "Tracker", lambda: started.append(1))
    for argv in (["--help"], ["--cfg", "job"], ["-m", "seed=0,1"], ["mlflow.enabled=false"]):
        tracker.maybe_start(argv)
    assert not started
    tracker.maybe_start(["strategy=jacrev"])
    assert started == [1]
    monkeypatch.setattr(tracker, "_STARTED", None)


def test_the_helper_writes_the_row_the_run_would_write(tmp_path):
    result = make_result(job_id="a" * 16, time_blocks_s=[1e-4, 1.5e-4], rel_err=None)
    helper = tracker.Tracker()
    try:
        path = helper.write_result(result, tmp_path / "helper")
        blocker = tmp_path / "a_file"
        blocker.write_text("")
        with pytest.raises(OSError) as refused:  # an OSError here, as in process: kept elsewhere
            helper.write_result(result, blocker / "results")
        assert refused.value.errno in (errno.ENOTDIR, errno.EEXIST)
    finally:
        helper.close()
    assert path.parent == tmp_path / "helper"
    write_result(result, tmp_path / "in_process")
    (by_helper,) = read_results(tmp_path / "helper").to_dict("records")
    (in_process,) = read_results(tmp_path / "in_process").to_dict("records")
    assert repr(by_helper) == repr(in_process)  # every value and type, nulls included
    assert by_helper["started_at"].to_pydatetime() == result.started_at
    assert [f.name for f in dataclasses.fields(result)] == list(by_helper)


def test_a_row_the_helper_fails_to_write_is_written_in_process(tmp_path, monkeypatch):
    helper = tracker.Tracker()

    def refuse(result, folder):
        raise tracker.TrackingError("ArrowInvalid: a value it could not convert")

    monkeypatch.setattr(helper, "write_result", refuse)
    monkeypatch.setattr(tracker, "_STARTED", helper)
    try:
        path = app.write_row(make_result(job_id="b" * 16), tmp_path)
        assert tracker.started() is helper  # still there for the MLflow run
    finally:
        helper.close()
    assert path.parent == tmp_path
    assert read_results(tmp_path)["job_id"].tolist() == ["b" * 16]
