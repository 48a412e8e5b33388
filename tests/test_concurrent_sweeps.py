"""Sweeps that share a folder: each keeps its own state, and a job claimed by one is never
measured again by another running beside it."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from helpers.cli import clean_env
from helpers.tracking import mlflow_runs, sqlite_uri
from jacbench.record.parquet import read_results
from jacbench.run.claims import CLAIMS, claimed, try_claim
from jacbench.run.sweep.state import STATE_DIR


def test_a_reused_sweep_folder_counts_only_this_sweeps_jobs(launch, tmp_path):
    args = ["-m", "strategy=jacrev,jacfwd", "report=false", "hydra.sweep.dir=sw"]
    launch(*args)
    code, _, printed = launch(*args)  # as if started in the same second: the same folder
    assert code == 0, printed
    assert "2/2 jobs recorded" in printed and "2 already done" in printed, printed
    assert len(list((tmp_path / "sw" / STATE_DIR).iterdir())) == 2  # one state per sweep


def test_a_live_claim_is_respected_and_a_dead_ones_taken_over(tmp_path):
    token, owner = try_claim(tmp_path, "abc")
    assert token and not owner
    again, owner = try_claim(tmp_path, "abc")
    assert not again and owner["pid"] == os.getpid()  # held by a live process
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claim = tmp_path / CLAIMS / "abc.claim"
    claim.write_text(json.dumps({**owner, "pid": dead.pid, "token": "old"}))
    token, owner = try_claim(tmp_path, "abc")
    assert token and not owner  # the dead process's claim was taken over
    assert json.loads(claim.read_text())["token"] == token


def _claim_file(folder, owner: dict, age_s: float):
    claim = folder / CLAIMS / "abc.claim"
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(json.dumps(owner))
    then = time.time() - age_s
    os.utime(claim, (then, then))
    return claim


@pytest.mark.parametrize(
    ("whose", "age_s", "taken_over"),
    [
        ("another host's", 2 * 3600, True),  # a SLURM task killed on node17 two hours ago
        ("another host's", 1, False),  # still beating: it cannot be checked from here
        ("an unrelated live process's", 2 * 3600, True),  # the pid was reused
        ("an earlier boot's", 1, True),  # the pid is from before a reboot
        ("an empty", 2 * 3600, True),  # its writer died before writing
        ("an empty", 1, False),  # its writer is writing it
    ],
)
def test_a_claim_that_stopped_beating_is_taken_over(tmp_path, whose, age_s, taken_over):
    """Issue 32: a claim from another host (2 hours old) or a same-host claim whose pid now
    belongs to an unrelated live process made a sweep wait forever."""
    from jacbench.run.claims import boot_id

    here = {"host": socket.gethostname(), "boot": boot_id(), "token": "old"}
    owner = {
        "another host's": {"pid": 4242, "host": "node17", "boot": "b", "token": "old"},
        "an unrelated live process's": {**here, "pid": os.getppid()},
        "an earlier boot's": {**here, "pid": os.getppid(), "boot": "an earlier one"},
        "an empty": {},
    }[whose]
    claim = _claim_file(tmp_path, owner, age_s)
    if not owner:
        claim.write_text("")
        os.utime(claim, (time.time() - age_s,) * 2)
    token, holder = try_claim(tmp_path, "abc")
    assert bool(token) == taken_over, holder
    if taken_over:
        assert json.loads(claim.read_text())["token"] == token


def test_a_held_claim_beats(tmp_path, monkeypatch):
    """The holder touches its claim, so a long job on another node is never taken over."""
    from jacbench.run import claims

    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.1)
    with claimed(tmp_path, "abc", lambda owner: None):
        claim = tmp_path / CLAIMS / "abc.claim"
        old = time.time() - 2 * claims.STALE_S
        os.utime(claim, (old, old))
        # waited for, not slept on: on a busy machine the heartbeat thread may wake late
        deadline = time.monotonic() + 30
        while claim.stat().st_mtime <= old + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert claim.stat().st_mtime > old + claims.STALE_S  # touched since: not stale
        again, owner = try_claim(tmp_path, "abc")
        assert not again and owner["pid"] == os.getpid()


def test_a_claim_that_cannot_be_written_is_not_left_empty(tmp_path, monkeypatch):
    """Issue 32: a disk-full attempt left an empty claim file, and the next sweep waited on it
    for a minute. The write fails for real: the claim's content goes to /dev/full."""
    from jacbench.run import claims

    real_fdopen = os.fdopen

    def onto_dev_full(fd: int, mode: str):
        os.close(fd)
        return real_fdopen(os.open("/dev/full", os.O_WRONLY), mode)

    monkeypatch.setattr(claims.os, "fdopen", onto_dev_full)
    with pytest.raises(OSError, match="No space left"):
        try_claim(tmp_path, "abc")
    assert not list((tmp_path / CLAIMS).iterdir())


def test_a_claimed_job_waits_for_its_owner(tmp_path):
    events = []
    held = threading.Event()

    def other_sweep():
        with claimed(tmp_path, "job", lambda owner: None):
            held.set()
            time.sleep(1.0)
            events.append("other done")

    thread = threading.Thread(target=other_sweep)
    thread.start()
    held.wait(5)
    with claimed(tmp_path, "job", lambda owner: events.append("waiting")) as waited:
        events.append("mine")
    thread.join()
    assert waited and events == ["waiting", "other done", "mine"]
    assert not list((tmp_path / CLAIMS).iterdir())  # released


@pytest.mark.slow
def test_two_sweeps_at_once_in_one_folder_run_each_job_once(tmp_path):
    """Two real sweeps started together with the same sweep folder."""
    from jacbench.record.mlflow_run import Tracking, ensure_experiment

    jobs = "strategy=jacrev,jacfwd,functional,autograd_loop"
    command = [sys.executable, "-m", "jacbench", "-m", jobs, "timing=quick", "report=false"]
    command += ["timing.memory=false", "hydra.sweep.dir=sw"]
    # The MLflow database and experiment exist before both start, as after any earlier run.
    ensure_experiment(Tracking.resolve(tmp_path, sqlite_uri(tmp_path), "jacbench"))
    runs = [
        subprocess.Popen(command, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    rows = read_results(tmp_path / "results")
    assert len(rows) == 4 and rows["config_hash"].nunique() == 4  # each job measured once
    for output in outputs:
        assert "4/4 jobs recorded" in output, output
    parents, children = mlflow_runs(sqlite_uri(tmp_path))
    assert len(parents) == 2 and len(children) == 4, outputs
    ran = {p.info.run_id: 0 for p in parents}
    for child in children:
        ran[child.data.tags["mlflow.parentRunId"]] += 1
    not_run = re.compile(r"\] job \d+: (already done|done by another sweep)")
    assert sorted(ran.values()) == sorted(4 - len(not_run.findall(o)) for o in outputs)


def describe(uri: str, start: Any, answers: Any) -> None:
    """In a forked process: describe the experiment when every process is ready."""
    from jacbench.record.mlflow_run import Tracking, connect, describe_experiment

    start.wait()
    try:
        describe_experiment(connect(Tracking(uri=uri, experiment="jacbench")))
        answers.put("ok")
    except Exception as exc:
        answers.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.slow  # ~6.5 s: three rounds of six processes starting together
def test_sweeps_starting_together_all_describe_the_experiment(tmp_path):
    """Each sweep sets the experiment's tags (description, runs view) as it starts; sweeps
    starting together insert the same new tags at once, and sqlite refused all but the first
    (UNIQUE constraint failed): that sweep lost its parent run's params and its jobs' nesting."""
    from jacbench.record.mlflow_run import Tracking, ensure_experiment

    ctx = multiprocessing.get_context("fork")  # the processes start with MLflow imported
    for trial in range(3):
        uri = sqlite_uri(tmp_path / str(trial))
        (tmp_path / str(trial)).mkdir()
        ensure_experiment(Tracking(uri=uri, experiment="jacbench"))  # as a first single run
        start, answers = ctx.Barrier(6), ctx.Queue()
        processes = [ctx.Process(target=describe, args=(uri, start, answers)) for _ in range(6)]
        for process in processes:
            process.start()
        got = [answers.get(timeout=120) for _ in processes]
        for process in processes:
            process.join()
        assert got == ["ok"] * 6, got
