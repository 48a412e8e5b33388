"""Shared helpers: run the real CLI (real Hydra, real MLflow sqlite) in a scratch folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jacbench.recorders.parquet import read_results

QUICK = ["timing=quick"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(extra)
    return env


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
