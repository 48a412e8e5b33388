"""Shared helpers: run the real CLI (real Hydra, real MLflow sqlite) in a scratch folder."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from jacbench.recorders.parquet import read_results
from jacbench.result import Result

QUICK = ["timing=quick"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(extra)
    return env


def make_result(**changes) -> Result:
    """A hand-built Result for tests of code that only reads results (schema, reports)."""
    base = {f.name: None for f in dataclasses.fields(Result)}
    base.update(
        model="mlp",
        strategy="jacrev",
        strategy_kind="exact",
        strategy_mode="reverse",
        chosen_strategy="",
        dtype="float32",
        device="cpu",
        wrt="input",
        n_in=3,
        n_out=2,
        batch=1,
        seed=0,
        status="ok",
        error_message="",
        time_median_s=1e-4,
        time_iqr_s=1e-6,
        n_timed=100,
        timing_warning="",
        first_call_s=2e-3,
        measure_s=0.5,
        ref_norm=1.0,
        out_norm=2.0,
        jacobian=[1.0, 2.0],
        threads=1,
        peak_mem_bytes=1024,
        memory_method="cpu",
        max_abs_err=1e-8,
        rel_err=2e-7,
        err_eps=1.7,
        tolerance=1.2e-5,
        within_tol=True,
        reference_method="forward_float64",
        reference_uncertainty=1e-16,
        strategy_options="{}",
        model_options="{}",
        config_hash="abc",
        mlflow_run_id="",
        torch_version="2",
        device_name="cpu",
        git_commit="",
        job_id="0123456789abcdef",
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )
    base.update(changes)
    return Result(**base)


class Cli:
    """``python -m jacbench`` run as a user runs it, from a scratch launch folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
        return subprocess.run(
            [sys.executable, "-m", "jacbench", *args],
            cwd=self.folder,
            env=env or clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def results(self) -> pd.DataFrame:
        return read_results(self.folder / "results")

    def summaries(self) -> list[Path]:
        return sorted(self.folder.glob("multirun/*/*/summary.parquet"))


def mlflow_runs(tracking_uri: str) -> tuple[list, list]:
    """(sweep parent runs, job runs) of the jacbench experiment, read back through MLflow."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name("jacbench")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("jacbench.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


LAUNCH_FAST = ["timing=quick", "timing.memory=false"]


@pytest.fixture
def launch(tmp_path, monkeypatch, capsys):
    """``python -m jacbench ARGS`` in process from a scratch folder: (exit code, the
    ``jacbench:`` lines of stderr, everything printed)."""
    from jacbench import app  # imported here: conftest stays light for every test

    monkeypatch.chdir(tmp_path)

    def run(*args: str, mlflow: bool = False) -> tuple[int, list[str], str]:
        tracking = f"mlflow.enabled={str(mlflow).lower()}"  # MLflow on: sqlite in tmp_path
        monkeypatch.setattr(sys, "argv", ["jacbench", *args, *LAUNCH_FAST, tracking])
        try:
            app.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        lines = [line for line in out.err.splitlines() if line.startswith("jacbench:")]
        return code, lines, out.out + out.err

    return run
