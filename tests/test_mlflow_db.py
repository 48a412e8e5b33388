"""A new local MLflow database is built by MLflow itself and placed atomically (issue 45: the
template database copied from the user's cache goes), so a database planted or corrupted
where that template was kept changes nothing (issue 46: it sent artifacts outside the launch
folder, ran its SQL triggers, and a truncated one broke tracking in every new folder)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from helpers.tracking import seed_store
from jacbench.record.mlflow_run import MLFLOW_DEFAULTS, Tracking, ensure_experiment


def revision(db: Path) -> str:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def test_a_new_database_is_mlflows_own_and_works(tmp_path: Path):
    tracking = Tracking.resolve(tmp_path / "a", None, "jacbench")
    experiment_id = ensure_experiment(tracking)
    db = tmp_path / "a" / "mlflow.db"
    assert revision(db)  # migrated by MLflow to a revision of its own
    assert [p.name for p in db.parent.iterdir()] == ["mlflow.db"]  # no scratch left
    client = MlflowClient(tracking.uri)
    run = client.create_run(experiment_id, run_name="x")
    assert client.get_run(run.info.run_id).info.run_name == "x"
    assert client.get_experiment(experiment_id).artifact_location.startswith(
        (tmp_path / "a").resolve().as_uri()
    )


def plant_template(cache: Path, outside: Path) -> None:
    """What issue 46 planted where jacbench kept its template: a 'jacbench' experiment whose
    artifacts go to ``outside``, and a trigger renaming every new run."""
    from mlflow.version import VERSION

    template = cache / "jacbench" / f"mlflow-{VERSION}-empty.db"
    template.parent.mkdir(parents=True)
    seed_store(template.parent)
    (template.parent / "mlflow.db").rename(template)
    now = int(time.time() * 1000)
    with sqlite3.connect(template) as db:
        db.execute(
            "INSERT INTO experiments (experiment_id, name, artifact_location, lifecycle_stage, "
            "creation_time, last_update_time) VALUES (7, 'jacbench', ?, 'active', ?, ?)",
            (outside.as_uri(), now, now),
        )
        db.execute(
            "CREATE TRIGGER planted AFTER INSERT ON runs BEGIN UPDATE runs SET name = "
            "'renamed-by-planted-trigger' WHERE run_uuid = new.run_uuid; END"
        )


def test_a_database_planted_where_the_template_was_changes_nothing(launch, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    plant_template(tmp_path / "xdg", tmp_path / "outside")
    code, lines, printed = launch("strategy=jacrev", mlflow=True, new_store=True)
    assert code == 0 and not lines, printed
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("jacbench")
    assert experiment.artifact_location == (tmp_path / "mlartifacts").resolve().as_uri()
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name.startswith("jacrev")


def test_mlflow_reads_jacbenchs_request_defaults_and_a_users_own_setting_is_kept(
    tmp_path: Path, monkeypatch
):
    """MLflow's own defaults back off for minutes against an unreachable server (7 retries,
    120 s timeout); jacbench's are put in place before its first client where the user set
    none, and they are the names MLflow reads."""
    from mlflow import environment_variables as mlflow_env

    for name in MLFLOW_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    seed_store(tmp_path)
    ensure_experiment(Tracking.resolve(tmp_path, None, "defaults"))
    assert mlflow_env.MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 2
    assert mlflow_env.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 10
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")  # the user's own
    ensure_experiment(Tracking.resolve(tmp_path, None, "defaults"))
    assert mlflow_env.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 7
    assert mlflow_env.MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get() is True
