"""A job's records: its row on disk (and its figures on screen) before any MLflow call, a
tracking server that never answers given up in one line, and a stopped command saying what
happened to the row (issue 46: D1, H3, U5)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.cli import LAUNCH_FAST, QUICK, clean_env
from helpers.tracking import sqlite_uri
from jacbench.record.parquet import read_results


@dataclass
class Silent:
    """A tracking server that accepts connections and never answers (hung, or a stuck
    proxy). At its first connection it notes what was on disk and on screen, and can send
    this process a signal then."""

    uri: str
    results: Path
    stdout: Path  # where a command run as a subprocess prints
    signal_at_first: int = 0
    rows_at_first: list[str] | None = None
    printed_at_first: str = ""
    held: list[socket.socket] = field(default_factory=list)

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.rows_at_first is None:
                self.rows_at_first = sorted(p.name for p in self.results.glob("*.parquet"))
                printed = self.stdout.read_text() if self.stdout.exists() else ""
                self.printed_at_first = printed or getattr(sys.stdout, "getvalue", str)()
                if self.signal_at_first:
                    os.kill(os.getpid(), self.signal_at_first)


@pytest.fixture
def silent_server(tmp_path: Path) -> Iterator[Silent]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
    server = Silent(uri, tmp_path / "results", tmp_path / "stdout.txt")
    thread = threading.Thread(target=server.serve, args=(listener,), daemon=True)
    thread.start()
    yield server
    listener.close()
    for conn in server.held:
        conn.close()


# One try of one second: a test waits seconds, not MLflow's (or jacbench's) default wait.
ONE_TRY = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "1", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}


def test_the_row_is_on_disk_and_shown_before_mlflow_and_a_silent_server_is_one_line(
    tmp_path, silent_server
):
    """D1/H3, as a user types it: the finished row waited ~60 s in memory behind the
    tracking helper's MLflow call, nothing was printed for 138 s, and a SIGTERM meanwhile
    lost the measurement."""
    command = [sys.executable, "-m", "jacbench", *LAUNCH_FAST]
    command.append(f"mlflow.tracking_uri={silent_server.uri}")
    with open(silent_server.stdout, "w") as out:
        proc = subprocess.run(
            command,
            cwd=tmp_path,
            env=clean_env(PYTHONUNBUFFERED="1", **ONE_TRY),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 1, proc.stderr
    (row,) = read_results(tmp_path / "results").to_dict("records")
    assert silent_server.rows_at_first == [p.name for p in (tmp_path / "results").iterdir()]
    assert "median time" in silent_server.printed_at_first  # the figures came first
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("jacbench:")]
    assert line.startswith(f"jacbench: MLflow tracking failed ({silent_server.uri})")
    assert "the parquet row is written" in line and "python -m jacbench.sync" in line
    assert row["status"] == "ok" and row["mlflow_run_id"] == ""


def test_a_signal_while_mlflow_logs_says_the_row_is_written(cli, silent_server):
    """U5: "the job in progress was not recorded" was printed with the row on disk."""
    silent_server.signal_at_first = signal.SIGTERM
    args = [*LAUNCH_FAST, f"mlflow.tracking_uri={silent_server.uri}"]
    proc = cli(*args, env=clean_env(**ONE_TRY))
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    (row,) = (cli.folder / "results").glob("*.parquet")
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("jacbench:")]
    assert line.startswith("jacbench: interrupted (SIGTERM); the job's row is written")
    assert str(row) in line and "python -m jacbench.sync" in line
    assert "not recorded" not in line


def test_a_signal_while_measuring_says_the_job_was_not_recorded(cli, monkeypatch):
    from jacbench.run import runner

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", stopped)
    proc = cli(*LAUNCH_FAST, "mlflow.enabled=false")
    assert proc.returncode == 130
    assert "jacbench: interrupted (Ctrl-C); the job in progress was not recorded" in proc.stderr
    assert not (cli.folder / "results").exists()


@pytest.mark.slow  # a second subprocess run; the first test above is one too
def test_a_single_run_is_in_mlflow_when_the_command_returns(tmp_path):
    """As a user types it: the row and its run, read back right away."""
    proc = subprocess.run(
        [sys.executable, "-m", "jacbench", *QUICK],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = read_results(tmp_path / "results").to_dict("records")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(sqlite_uri(tmp_path)).get_run(row["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["jacbench.job_id"] == row["job_id"]
    assert run.data.metrics["time_median_ms"] > 0
    assert f"MLflow run: {row['mlflow_run_id']}" in proc.stdout


def test_a_sweep_against_a_silent_server_waits_on_it_once(cli, silent_server):
    """Each job of a sweep waited on the server again (issue 46, D1 in a sweep)."""
    args = ["-m", "strategy=jacrev,jacfwd,functional", *LAUNCH_FAST, "report=false"]
    proc = cli(*args, f"mlflow.tracking_uri={silent_server.uri}", env=clean_env(**ONE_TRY))
    assert proc.returncode == 1, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("jacbench:")]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"jacbench: MLflow tracking failed ({silent_server.uri})")
    assert "records its rows without MLflow runs" in lines[0]
    assert "3 job(s) (0, 1, 2) have no MLflow run" in lines[1]
    assert len(silent_server.held) == 1  # one request, the sweep's: no job asked again
    assert len(cli.results()) == 3


def test_what_a_stop_says_it_kept_follows_the_row(tmp_path):
    from jacbench.run.progress import JobProgress

    single, sweep = JobProgress(), JobProgress(in_sweep=True)
    assert single.line() == "nothing was measured"
    assert sweep.line() == "rows recorded so far are kept (run the same sweep again to resume)"
    for progress in (single, sweep):
        progress.measuring()
        assert progress.line().startswith("the job in progress was not recorded")
        progress.written(tmp_path / "row.parquet")
        assert progress.line().startswith(f"the job's row is written ({tmp_path / 'row.parquet'})")
        progress.written(None)
        assert "could not be written" in progress.line()
        progress.recorded()
        assert progress.line().startswith("the job is recorded")
    assert sweep.line().endswith(
        "rows recorded before it are kept (run the same sweep again to resume)"
    )
