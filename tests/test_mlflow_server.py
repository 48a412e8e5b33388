"""A sweep against a real `mlflow server` on 127.0.0.1, checked through MlflowClient."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import NO_REPORT, QUICK, clean_env, mlflow_runs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    log = (root / "server.log").open("w")
    # Without the server's job runner (MLflow's asynchronous GenAI jobs, a second Python
    # process that tracking never uses): ready in ~10 s instead of ~13 s, and ~11 s of CPU
    # to start instead of 19-25 s.
    no_job_runner = clean_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'server.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=no_job_runner,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"mlflow server did not start:\n{(root / 'server.log').read_text()}")
        time.sleep(0.5)
    yield uri
    server.terminate()
    server.wait(timeout=30)
    log.close()


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
