"""A new local MLflow database is a copy of an empty one MLflow built once per MLflow version
(issue 11: seconds of migrations per launch folder), placed atomically as before."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from jacbench.record.mlflow_db import cache_dir, create_atomically, empty_template
from jacbench.record.mlflow_run import MLFLOW_DEFAULTS, Tracking, ensure_experiment


class Messages(logging.Handler):
    """What MLflow logs: it says "Creating initial MLflow database tables" when it migrates."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def revision(db: Path) -> str:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def test_new_databases_are_copies_of_one_template_and_work(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = empty_template()  # MLflow migrates once, here
    migrations = Messages()
    logging.getLogger("mlflow.store.db.utils").addHandler(migrations)
    try:
        for name in ("a", "b"):
            folder = tmp_path / name
            tracking = Tracking.resolve(folder, None, "jacbench")
            experiment_id = ensure_experiment(tracking)
            assert revision(folder / "mlflow.db") == revision(template)
            client = MlflowClient(tracking.uri)
            run = client.create_run(experiment_id, run_name="x")
            assert client.get_run(run.info.run_id).info.run_name == "x"
            # MLflow's default experiment, remade by MLflow for this folder's copy
            assert client.get_experiment("0").name == "Default"
            assert client.get_experiment(experiment_id).artifact_location.startswith(
                folder.resolve().as_uri()
            )
    finally:
        logging.getLogger("mlflow.store.db.utils").removeHandler(migrations)
    assert not [m for m in migrations.seen if "Creating initial" in m], migrations.seen
    assert [p.name for p in cache_dir().iterdir()] == [template.name]  # no scratch left


def test_without_a_usable_cache_mlflow_builds_the_database_in_place(tmp_path: Path, monkeypatch):
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    db = tmp_path / "launch" / "mlflow.db"
    create_atomically(db)
    assert revision(db) and [p.name for p in db.parent.iterdir()] == ["mlflow.db"]
    with pytest.raises(OSError):
        empty_template()


def test_mlflow_reads_jacbenchs_request_defaults_and_a_users_own_setting_is_kept(
    tmp_path: Path, monkeypatch
):
    """MLflow's own defaults back off for minutes against an unreachable server (7 retries,
    120 s timeout); jacbench's are put in place before its first client where the user set
    none, and they are the names MLflow reads."""
    from mlflow import environment_variables as mlflow_env

    for name in MLFLOW_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")  # the user's own
    ensure_experiment(Tracking.resolve(tmp_path, None, "defaults"))
    assert mlflow_env.MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 2
    assert mlflow_env.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 7
    assert mlflow_env.MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get() is True
