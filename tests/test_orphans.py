"""A sweep killed with ``kill -9`` leaves no worker process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import clean_env, compose_job
from jacbench.run.claims import CLAIMS
from jacbench.run.launchers import LauncherKind, launcher_kind
from jacbench.run.orphans import exit_with


def alive(pid: int) -> bool:
    """Running (a zombie that nobody reaps counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def still_alive(pids: set[int], seconds: float) -> set[int]:
    end = time.monotonic() + seconds
    while {p for p in pids if alive(p)} and time.monotonic() < end:
        time.sleep(0.05)
    return {p for p in pids if alive(p)}


# A job in a process the sweep started: watched from the moment it starts.
WATCHED = (
    "import os, time; from jacbench.run.orphans import exit_with; "
    "import sys; assert exit_with(int(sys.argv[1]), True, 0.05); print('watching', flush=True); "
    "time.sleep(60)"
)
# A job that starts only after the sweep died (killed while its worker was starting).
LATE = (
    "import os, sys, time; sweep = int(sys.argv[1]); from jacbench.run.orphans import exit_with\n"
    "while os.getppid() == sweep: time.sleep(0.01)\n"
    "exit_with(sweep, True, 0.05); time.sleep(60)"
)


def sweep_process(worker: str) -> subprocess.Popen:
    """A stand-in for the sweep's process: starts ``worker`` and prints its pid."""
    code = (
        "import os, subprocess, sys; "
        f"child = subprocess.Popen([sys.executable, '-c', {worker!r}, str(os.getpid())]); "
        "print(child.pid, flush=True); child.wait()"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=clean_env(),
    )


@pytest.mark.parametrize("worker", [WATCHED, LATE], ids=["running", "not yet started"])
def test_a_worker_exits_when_the_sweeps_process_is_killed(worker):
    sweep = sweep_process(worker)
    try:
        pid = int(sweep.stdout.readline())
        if worker == WATCHED:
            assert sweep.stdout.readline().strip() == "watching"
        sweep.kill()  # kill -9: no cleanup of its own
        sweep.wait()
        assert not still_alive({pid}, 10)
        said = sweep.stderr.read()
        assert f"the sweep's process {sweep.pid} is gone; worker {pid} exits" in said
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)


def test_only_a_job_in_a_process_the_sweep_started_is_watched():
    assert not exit_with(0, True)  # a sweep state of an older jacbench
    assert not exit_with(os.getpid(), True)  # the basic launcher: jobs in the sweep's process
    assert not exit_with(os.getppid(), False)  # a SLURM job: its sweep may end before it


@pytest.mark.parametrize(
    ("choice", "kind"),
    [
        ("basic", LauncherKind.IN_PROCESS),
        ("joblib", LauncherKind.JOBLIB),
        ("local", LauncherKind.LOCAL),
        ("submitit_local", LauncherKind.LOCAL),
        ("slurm", LauncherKind.OTHER),
        ("slurm_cpu", LauncherKind.OTHER),
    ],
)
def test_each_launcher_a_user_picks_is_told_apart(choice: str, kind: LauncherKind):
    """From the composed ``hydra.launcher`` (jacbench's joblib launcher is a subclass of the
    plugin's): only processes the sweep started on this machine are watched, and only joblib
    workers share its cores."""
    cfg = compose_job(f"hydra/launcher={choice}", with_hydra=True)
    assert launcher_kind(cfg.hydra.launcher) == kind
    assert kind.beside_sweep == (choice in ("joblib", "local", "submitit_local"))


def loky_workers(pid: int) -> set[int]:
    return {k for k in children(pid) if b"popen_loky" in Path(f"/proc/{k}/cmdline").read_bytes()}


@pytest.mark.slow
def test_kill_9_of_a_joblib_sweep_leaves_no_worker_or_resource_tracker(tmp_path):
    """Killed while both workers measure. (A worker killed with its sweep before its first
    job is not watched since jacbench no longer replaces joblib's loky backend to start the
    watch in each worker: it ends at loky's own idle timeout; docs/sweeps.md.)"""
    command = [sys.executable, "-m", "jacbench", "-m", "hydra/launcher=joblib"]
    command += ["hydra.launcher.n_jobs=2", "strategy=jacrev,jacfwd,functional,autograd_loop"]
    command += ["timing.min_run_time=60", "mlflow.enabled=false", "report=false"]
    sweep = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        claims = tmp_path / "results" / CLAIMS
        end = time.monotonic() + 120
        while len(list(claims.glob("*.claim"))) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        assert len(list(claims.glob("*.claim"))) == 2  # both workers are measuring
        helpers = children(sweep.pid)  # loky workers (and resource trackers once started)
        assert len(loky_workers(sweep.pid)) == 2, helpers
        sweep.kill()
        sweep.wait()
        assert not still_alive(helpers, 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)
