"""MLflow's sqlite store as the tests read it back or break it."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from pathlib import Path


def sqlite_uri(folder: Path) -> str:
    """The tracking URI a job launched in ``folder`` uses by default."""
    return f"sqlite:///{folder / 'mlflow.db'}"


def half_made_db(path: Path) -> None:
    """What a process killed during MLflow's migrations leaves: every table made, the
    schema version not yet stamped, a later table missing."""
    import sqlite3

    made = path.with_name("made.db")
    shutil.copyfile(_store_made_once(), made)
    with contextlib.closing(sqlite3.connect(made)) as db:
        db.executescript("DELETE FROM alembic_version; DROP TABLE secrets;")
    os.replace(made, path)


def _runs(tracking_uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name("jacbench")
    return client.search_runs([experiment.experiment_id], max_results=1000)


def mlflow_runs(tracking_uri: str) -> tuple[list, list]:
    """(sweep parent runs, job runs) of the jacbench experiment, read back through MLflow
    (a sweep's answer runs, one per problem, are not jobs: ``answer_runs``)."""
    runs = _runs(tracking_uri)
    parents = [r for r in runs if r.data.tags.get("jacbench.role") == "sweep"]
    children = [
        r
        for r in runs
        if "mlflow.parentRunId" in r.data.tags and r.data.tags.get("jacbench.role") != "answer"
    ]
    return parents, children


def answer_runs(tracking_uri: str) -> list:
    """The answer runs (one per problem of a sweep of several) under the sweeps' runs."""
    return [r for r in _runs(tracking_uri) if r.data.tags.get("jacbench.role") == "answer"]


@functools.cache
def _store_made_once() -> Path:
    """An empty database that MLflow built (atomically, as jacbench does), once per test
    process: building one runs MLflow's migrations, about a CPU-second each time."""
    from jacbench.record.mlflow_db import create_atomically

    made = Path(tempfile.mkdtemp(prefix="jacbench-store-")) / "mlflow.db"
    create_atomically(made)
    return made


def seed_store(folder: Path) -> None:
    """Give ``folder`` the MLflow database a first run there would have built (a copy of
    one MLflow built once), unless it has one: the tests of building it build their own."""
    db = folder / "mlflow.db"
    if not db.exists():
        shutil.copyfile(_store_made_once(), db)
