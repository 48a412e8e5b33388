"""A sweep against a real `mlflow server` on 127.0.0.1, checked through MlflowClient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.cli import NO_REPORT, QUICK, clean_env, load_script
from helpers.tracking import mlflow_runs


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``mlflow server`` that stores the artifacts it is sent (as a team's server
    does), started as ``scripts/mlflow_ui_check.py`` starts one, without MLflow variables."""
    root: Path = tmp_path_factory.mktemp("mlflow_server")
    start = load_script("mlflow_ui_check").mlflow_server
    artifacts = ("--artifacts-destination", str(root / "artifacts"))
    with start(root / "server.db", root / "server.log", *artifacts, env=clean_env()) as uri:
        yield uri


@pytest.mark.slow  # over 10 s: a real sweep or a subprocess per run
def test_sweep_against_a_real_tracking_server(cli, mlflow_server):
    env = clean_env(MLFLOW_TRACKING_URI=mlflow_server)
    jobs = ["strategy=jacrev,fd_central", "dtype=float32,float64"]
    proc = cli("-m", *jobs, *QUICK, *NO_REPORT, env=env)  # the report: tests/test_report.py
    assert proc.returncode == 0, proc.stderr
    assert not (cli.folder / "mlflow.db").exists()  # everything went to the server
    rows = cli.results()
    assert len(rows) == 4 and set(rows["status"]) == {"ok"}

    (parent,), children = mlflow_runs(mlflow_server)
    assert parent.info.status == "FINISHED" and parent.data.metrics["n_jobs"] == 4
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    by_id = {c.info.run_id: c for c in children}
    assert set(by_id) == set(rows["mlflow_run_id"])
    for _, row in rows.iterrows():
        run = by_id[row["mlflow_run_id"]]
        median_ms = row["time_median_s"] * 1e3
        assert run.data.metrics["time_median_ms"] == pytest.approx(median_ms, rel=1e-3)
        assert run.data.metrics["rel_err"] == pytest.approx(row["rel_err"], rel=1e-3)
        assert run.data.params["dtype"] == row["dtype"]
    artifacts = MlflowClient(mlflow_server).list_artifacts(parent.info.run_id)
    assert "summary.parquet" in {a.path for a in artifacts}
