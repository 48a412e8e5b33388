"""Sweeps on a real one-node SLURM cluster (scripts/slurm_local.sh), as a user runs them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.cli import NO_REPORT, QUICK, clean_env, compose_job
from helpers.tracking import mlflow_runs

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_local.sh"
CPU = ["hydra/launcher=slurm_cpu"]


def cluster_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """Bring the local cluster up (quick when `.ci/run` already did), and down again after
    these tests if they brought it up; skip where it cannot run."""
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (scripts/slurm_local.sh installs it)")
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        pytest.skip("no SLURM and no apt-get to install it")
    was_up = cluster_answers()
    up = subprocess.run([SCRIPT, "up"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr
    yield
    if not was_up:
        subprocess.run([SCRIPT, "down"], capture_output=True, timeout=120)


def launcher(*overrides: str):
    """The resolved hydra.launcher node of a composed config, as the launcher receives it."""
    cfg = compose_job(*overrides, with_hydra=True)
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)


def test_gpu_preset_asks_for_a_gpu_only_for_cuda():
    assert launcher("hydra/launcher=slurm", "device=cuda")["gpus_per_task"] == 1
    assert launcher("hydra/launcher=slurm", "device=cpu")["gpus_per_task"] is None
    cpu = launcher("hydra/launcher=slurm_cpu", "hydra.launcher.mem_gb=4")
    assert (cpu["gpus_per_task"], cpu["cpus_per_task"], cpu["mem_gb"]) == (None, 1, 4)


def submitted(folder: Path) -> dict[str, int]:
    """SLURM job id -> how many tasks it ran, for the sweeps launched from ``folder`` (from
    submitit's folders: ``<id>_<index>`` per task of an array, ``<id>`` for a single job)."""
    tasks: dict[str, set[str]] = {}
    for path in folder.glob("multirun/*/*/.submitit/*"):
        if path.is_dir() and (match := re.fullmatch(r"(\d+)(?:_(\d+))?", path.name)):
            tasks.setdefault(match.group(1), set()).update(filter(None, [match.group(2)]))
    return {job: max(len(indices), 1) for job, indices in tasks.items()}


def array_job(folder: Path) -> str:
    """The SLURM array job id of the one sweep submitted from ``folder``."""
    (job,) = submitted(folder)
    return job


def final_states(job: str, settle_s: float = 60) -> list[str]:
    """The array's task states in SLURM's accounting once none is RUNNING: submitit counts a
    task done when its result file exists, while its process may still be exiting."""
    deadline = time.monotonic() + settle_s
    while True:
        states = subprocess.run(
            ["sacct", "-n", "-X", "-j", job, "-o", "State"], capture_output=True, text=True
        ).stdout.split()
        if "RUNNING" not in states or time.monotonic() > deadline:
            return states
        time.sleep(1)


@pytest.mark.slow
def test_a_sweep_runs_as_a_slurm_array_is_accounted_and_resumes(cluster, cli):
    # two tasks (each a process that imports torch, ~3 CPU-s, twice): an array all the same
    grid = ["-m", "strategy=jacrev,jacfwd", *CPU, *QUICK, *NO_REPORT]
    proc = cli(*grid, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "2/2 jobs recorded: 2 ok" in proc.stdout
    rows = cli.results()
    assert len(rows) == 2 and set(rows["status"]) == {"ok"}
    parents, children = mlflow_runs(cli.tracking_uri)
    assert len(parents) == 1 and len(children) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    job = array_job(cli.folder)
    assert final_states(job) == ["COMPLETED"] * 2

    again = cli(*grid, timeout=600)  # 55-95 s alone; 300 s ran out beside the browser tests
    assert again.returncode == 0, again.stderr
    assert "2 already done (resumed)" in again.stdout
    # each task asks on its node (a row is valid on the machine that measured it, which the
    # launching process cannot know: docs/cluster.md): queued again, nothing measured again
    assert sorted(submitted(cli.folder).values()) == [2, 2]
    assert len(cli.results()) == 2


@pytest.mark.slow
def test_an_impossible_request_fails_at_submit_with_slurms_message(cluster, cli):
    proc = cli("-m", "strategy=jacrev", *CPU, "hydra.launcher.cpus_per_task=512", *QUICK)
    assert proc.returncode != 0
    assert "Batch job submission failed: More processors requested" in proc.stderr


def running_task(index: int, timeout: float = 120) -> str:
    """The SLURM id (``<array>_<index>``) of a running jacbench task, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-n", "jacbench", "-t", "R", "-o", "%i"],
            capture_output=True,
            text=True,
        ).stdout.split()
        found = [t for t in out if t.endswith(f"_{index}")]
        if found:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"task {index} never ran")


@pytest.mark.slow
def test_a_cancelled_task_is_reported_the_others_counted_and_a_rerun_redoes_only_it(cluster, cli):
    # job 0 measures for 5 s (after ~3 s of start-up) and is cancelled as soon as it runs
    # (squeue is asked every 0.5 s), while job 1 runs and finishes after it died; its rerun
    # measures those 5 s again
    grid = ["-m", "timing.min_run_time=5,0.05", *CPU, "timing.warmup=0", *NO_REPORT]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "jacbench", *grid],
        cwd=cli.folder,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    task = running_task(0)
    subprocess.run(["scancel", task], check=True)
    out, _ = sweep.communicate(timeout=240)  # the launcher does not hang on the dead task
    assert sweep.returncode == 1, out
    assert re.search(rf"jacbench: the launcher stopped \(\w+: Job {task} .*CANCELLED", out), out
    assert "1/2 jobs recorded: 1 ok" in out and "1 without a record" in out
    parents, children = mlflow_runs(cli.tracking_uri)
    assert len(parents) == 1 and len(children) == 1
    assert parents[0].data.metrics["n_ok"] == 1 and parents[0].data.metrics["n_missing"] == 1

    again = cli(*grid, timeout=600)  # 55-95 s alone; 300 s ran out beside the browser tests
    assert again.returncode == 0, again.stderr
    assert "2/2 jobs recorded: 2 ok" in again.stdout and "1 already done" in again.stdout
    # every task queued again, each asking on its node (docs/cluster.md); job 0 alone measured
    assert sorted(submitted(cli.folder).values()) == [2, 2]
    assert (cli.results()["status"] == "ok").sum() == 2


@pytest.mark.slow  # needs the local cluster up: seconds
def test_a_pending_task_is_named_with_squeues_reason(cluster):
    from jacbench.run.sweep.slurm import pending_reasons

    held = subprocess.run(
        ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        assert pending_reasons([held]) == [f"{held} pending (JobHeldUser)"]
    finally:
        subprocess.run(["scancel", held], check=True)
