"""docs/cluster.md's shared tracking server (``scripts/tracking_server.sh``), run for real: it
starts on the pinned MLflow with the admin password from the environment, an authorised user
creates a run, an anonymous request is refused, and a second local user reads none of its
files (issue 60: the recipe did not start on MLflow 3.17, and left the run and password
databases readable by every user)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.cli import SCRIPTS, clean_env

ADMIN_PASSWORD = "jacbench-test-admin-pw-1"
OTHER_USER = 65534  # nobody: a local user who is not the server's


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _status(url: str, body: dict, auth: str | None = None) -> int:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    if auth:
        import base64

        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _as_other_user(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(command),
        user=OTHER_USER,
        group=OTHER_USER,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.slow  # a real mlflow server: ~15-30 s to start
def test_the_tracking_server_recipe_runs_with_a_login_and_private_files(
    tmp_path, monkeypatch, request
):
    if os.geteuid() != 0:
        pytest.skip("a second local user cannot be switched to without root (the file check)")
    # a shared folder every user can reach (pytest's own tmp_path is its user's alone)
    shared = Path(tempfile.mkdtemp(prefix="jacbench-shared-"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o755)
    (shared / "notes.txt").write_text("a co-user's readable file")
    (shared / "notes.txt").chmod(0o644)
    store = shared / "jacbench-mlflow"
    port = _free_port()
    env = clean_env(MLFLOW_AUTH_ADMIN_PASSWORD=ADMIN_PASSWORD)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # no GenAI job runner: starts sooner
    script = str(SCRIPTS / "tracking_server.sh")

    refused = subprocess.run(
        [script, str(tmp_path / "unset")], env=clean_env(), capture_output=True, text=True
    )
    assert refused.returncode == 2 and "MLFLOW_AUTH_ADMIN_PASSWORD" in refused.stderr

    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [script, str(store), "127.0.0.1", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5):
                    break
            except OSError:
                text = (tmp_path / "server.log").read_text()
                assert server.poll() is None, f"the recipe did not start:\n{text}"
                assert time.monotonic() < deadline, f"no /health in 120 s:\n{text}"
                time.sleep(0.5)
        create = f"{url}/api/2.0/mlflow/experiments/create"
        assert _status(create, {"name": "anonymous"}) == 401
        assert _status(create, {"name": "default-pw"}, "admin:password1234") == 401

        from mlflow.tracking import MlflowClient

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
        client = MlflowClient(tracking_uri=url)
        experiment = client.create_experiment("jacbench")
        run = client.create_run(experiment)
        client.log_metric(run.info.run_id, "time_median_ms", 1.0)
        client.set_terminated(run.info.run_id)
        assert client.get_run(run.info.run_id).data.metrics["time_median_ms"] == 1.0

        runs = f"{url}/api/2.0/mlflow/runs/create"
        assert _status(runs, {"experiment_id": experiment}) == 401  # anonymous
        files = ["mlflow.db", "basic_auth.db", "basic_auth.ini", "secret_key"]
        assert stat_mode(store) == 0o700
        for name in files:
            assert stat_mode(store / name) & 0o077 == 0, name
        assert _as_other_user("cat", str(shared / "notes.txt")).returncode == 0  # reachable
        for name in files:
            read = _as_other_user("cat", str(store / name))
            assert read.returncode != 0 and "Permission denied" in read.stderr, name
        listed = _as_other_user("ls", str(store))
        assert listed.returncode != 0 and "Permission denied" in listed.stderr
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)
        log.close()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
