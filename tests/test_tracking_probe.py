"""A sweep whose tracking server accepts connections and never answers says so at once and
records its rows (issue 60: it was silent for 75 s, until its rows landed)."""

from __future__ import annotations

import socket
import time

import pytest

from helpers.cli import clean_env
from jacbench.record.server_probe import unanswered


@pytest.fixture
def silent_server():
    """A TCP port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_silent_server_is_told_within_the_probe_time(silent_server):
    started = time.monotonic()
    why = unanswered(silent_server, timeout_s=1.0)
    assert "no answer from" in why and time.monotonic() - started < 3
    assert unanswered("sqlite:///x.db") == ""


@pytest.mark.slow
def test_a_sweep_says_at_once_its_tracking_server_is_silent_and_records_rows(
    launch, tmp_path, silent_server
):
    started = time.monotonic()
    env = clean_env(MLFLOW_TRACKING_URI=silent_server)
    code, lines, printed = launch("-m", "strategy=jacrev,jacfwd", mlflow=True, env=env)
    elapsed = time.monotonic() - started
    told = [line for line in lines if "MLflow tracking failed" in line]
    assert len(told) == 1 and "does not answer" in told[0], printed
    assert "python -m jacbench.sync logs them" in told[0]
    assert len(list((tmp_path / "results").glob("*.parquet"))) == 2, printed
    assert elapsed < 30, f"{elapsed:.0f} s: MLflow's own tries were waited out"
    assert code == 1  # rows without their runs: the sweep says so in its exit code
