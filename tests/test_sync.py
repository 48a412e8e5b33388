"""``python -m jacbench.sync``: rows recorded while tracking was down get their MLflow runs."""

from __future__ import annotations

import dataclasses

import pyarrow.parquet as pq

from helpers.results import make_result
from helpers.tracking import half_made_db, seed_store, sqlite_uri
from jacbench import sync
from jacbench.record.mlflow_run import JOB_TAG
from jacbench.record.parquet import read_results, write_result
from jacbench.record.run_ids import RUNS
from jacbench.record.sync import row_result


def job_runs(tmp_path) -> list:
    """The jacbench experiment's runs of jobs (tagged with their job id), through MLflow."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(tmp_path))
    experiment = client.get_experiment_by_name("jacbench")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return [run for run in runs if JOB_TAG in run.data.tags]


def run_ids(tmp_path) -> dict[str, str]:
    rows = read_results(tmp_path / "results")
    return dict(zip(rows["job_id"], rows["mlflow_run_id"], strict=True))


def run_sync(tmp_path, monkeypatch, capsys) -> tuple[int, str]:
    """``python -m jacbench.sync results`` typed in the launch folder (default tracking)."""
    seed_store(tmp_path)  # where no run has made it: a copy of one MLflow built once
    monkeypatch.chdir(tmp_path)
    code = sync.main(["results"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_rows_recorded_without_tracking_get_their_runs_once(launch, tmp_path, monkeypatch, capsys):
    code, _, printed = launch("-m", "strategy=jacrev,jacfwd", "report=false")  # MLflow off
    assert code == 0, printed
    code, _, printed = launch("strategy=functional", mlflow=True)
    assert code == 0, printed
    ids = run_ids(tmp_path)
    assert sorted(bool(i) for i in ids.values()) == [False, False, True]
    assert [r.data.tags[JOB_TAG] for r in job_runs(tmp_path)] == [j for j, i in ids.items() if i]

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    assert code == 0, printed
    assert "2 row(s) without an MLflow run now have one" in printed, printed
    runs = {run.data.tags[JOB_TAG]: run for run in job_runs(tmp_path)}
    synced = run_ids(tmp_path)
    assert sorted(runs) == sorted(synced) and all(synced.values())
    for job_id, run in runs.items():  # each row names its own, complete run
        assert run.info.run_id == synced[job_id] and run.info.status == "FINISHED"
        assert run.data.params["strategy"] and run.data.metrics["time_median_ms"] > 0
    assert {ids[j] for j in ids if ids[j]} <= set(synced.values())  # the tracked one kept

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    assert code == 0 and "0 row(s) without an MLflow run" in printed, printed
    assert len(job_runs(tmp_path)) == 3 and run_ids(tmp_path) == synced


def test_a_run_logged_but_not_noted_is_found_not_logged_again(
    launch, tmp_path, monkeypatch, capsys
):
    code, _, printed = launch("strategy=jacrev", mlflow=True)
    assert code == 0, printed
    logged = run_ids(tmp_path)
    (note,) = (tmp_path / "results" / RUNS).iterdir()
    note.unlink()  # as if the job had been stopped right after logging its run,
    (path,) = (tmp_path / "results").glob("*.parquet")  # before its row was linked to it
    unlinked = dataclasses.replace(row_result(pq.read_table(path)), mlflow_run_id="")
    write_result(unlinked, path.parent)
    assert not any(run_ids(tmp_path).values())

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    assert code == 0, printed
    assert run_ids(tmp_path) == logged and len(job_runs(tmp_path)) == 1  # not logged twice


def test_rows_are_written_before_their_runs_then_carry_their_run_ids(launch, tmp_path):
    """Issue 45: a row is on disk before its MLflow run is logged; issue 59: then rewritten
    (atomically, under its name) with its run's id, so plain pandas reads the link too."""
    from jacbench.record.mlflow_run import LOGGED_AT_TAG

    code, _, printed = launch("-m", "strategy=jacrev,jacfwd", "report=false", mlflow=True)
    assert code == 0, printed
    runs = {r.data.tags[JOB_TAG]: r for r in job_runs(tmp_path)}
    assert run_ids(tmp_path) == {job: r.info.run_id for job, r in runs.items()}
    for path in (tmp_path / "results").glob("*.parquet"):
        table = pq.read_table(path)
        run = runs[table.column("job_id")[0].as_py()]
        assert table.column("mlflow_run_id")[0].as_py() == run.info.run_id
        written = float(table.column("started_at")[0].as_py().timestamp())
        assert written <= float(run.data.tags[LOGGED_AT_TAG]) <= path.stat().st_mtime


def test_tracking_still_down_is_one_line_and_rows_are_left_as_they_are(
    launch, tmp_path, monkeypatch, capsys
):
    code, _, printed = launch("-m", "strategy=jacrev,jacfwd", "report=false")
    assert code == 0, printed
    half_made_db(tmp_path / "mlflow.db")
    before = {p: p.read_bytes() for p in (tmp_path / "results").glob("*.parquet")}

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    lines = [line for line in printed.splitlines() if line.startswith("jacbench:")]
    assert code == 1 and len(lines) == 1, printed
    assert "MLflow tracking failed" in lines[0] and "2 file(s) not checked" in lines[0]
    assert "Traceback" not in printed
    assert {p: p.read_bytes() for p in before} == before


def test_a_row_mlflow_cannot_take_is_named_and_the_others_are_synced(tmp_path, monkeypatch, capsys):
    good = write_result(make_result(job_id="a" * 16, config_hash="good"), tmp_path / "results")
    bad = make_result(job_id="b" * 16, config_hash="bad", model_options="{not json")
    bad_path = write_result(bad, tmp_path / "results")

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    lines = [line for line in printed.splitlines() if line.startswith("jacbench:")]
    assert code == 1 and len(lines) == 1, printed
    assert f"{bad_path.name}: no MLflow run logged (JSONDecodeError" in lines[0]
    assert "1 row(s) without an MLflow run now have one" in printed
    (run,) = job_runs(tmp_path)
    assert run.data.tags[JOB_TAG] == "a" * 16 and run_ids(tmp_path)["a" * 16] == run.info.run_id
    assert good.exists() and not run_ids(tmp_path)["b" * 16]


def _cut_short_run(tmp_path, job_id: str, created_s_ago: float) -> str:
    """A run as a kill leaves it mid-log: created with its job id, never closed."""
    import time

    from mlflow.tracking import MlflowClient

    from jacbench.record.mlflow_run import LOGGED_AT_TAG, Tracking, ensure_experiment

    seed_store(tmp_path)
    tracking = Tracking.resolve(tmp_path, sqlite_uri(tmp_path), "jacbench")
    experiment_id = ensure_experiment(tracking)
    tags = {JOB_TAG: job_id, LOGGED_AT_TAG: f"{time.time() - created_s_ago:.3f}"}
    return MlflowClient(sqlite_uri(tmp_path)).create_run(experiment_id, tags=tags).info.run_id


def test_a_run_a_kill_cut_short_is_replaced_not_duplicated(tmp_path, monkeypatch, capsys):
    """Issue 32: SIGKILLs of a sync left RUNNING runs, and the next sync logged the row again."""
    write_result(make_result(job_id="c" * 16, config_hash="cut"), tmp_path / "results")
    orphan = _cut_short_run(tmp_path, "c" * 16, created_s_ago=3600)

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    assert code == 0, printed
    (run,) = job_runs(tmp_path)  # the cut-short run is gone, one complete run is left
    assert run.info.run_id != orphan and run.info.status == "FINISHED"
    assert run_ids(tmp_path)["c" * 16] == run.info.run_id


def test_a_run_being_logged_now_is_not_logged_again(tmp_path, monkeypatch, capsys):
    write_result(make_result(job_id="d" * 16, config_hash="live"), tmp_path / "results")
    live = _cut_short_run(tmp_path, "d" * 16, created_s_ago=1)

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    assert code == 1 and "being logged now" in printed, printed
    assert [r.info.run_id for r in job_runs(tmp_path)] == [live]
    assert not run_ids(tmp_path)["d" * 16]


def test_a_job_id_with_a_quote_stops_only_its_own_row(tmp_path, monkeypatch, capsys):
    """Issue 32: a job_id containing a quote made every sync stop at that file."""
    write_result(make_result(job_id="it's", config_hash="quote"), tmp_path / "results")
    write_result(make_result(job_id="e" * 16, config_hash="plain"), tmp_path / "results")

    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    lines = [line for line in printed.splitlines() if line.startswith("jacbench:")]
    assert code == 1 and len(lines) == 1 and "cannot be searched for" in lines[0], printed
    assert "1 row(s) without an MLflow run now have one" in printed
    assert run_ids(tmp_path)["e" * 16] and not run_ids(tmp_path)["it's"]


def test_a_foreign_row_is_named_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Issue 32: syncing a foreign file ended in 'NoneType' object has no attribute ..."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "results").mkdir()
    row = {"status": "ok", "strategy": "jacrev", "model": "mine", "mlflow_run_id": ""}
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "results" / "mine.parquet")
    code, printed = run_sync(tmp_path, monkeypatch, capsys)
    assert code == 1 and "Traceback" not in printed, printed
    assert (
        "mine.parquet: no MLflow run logged (ValueError: not a complete jacbench row: no "
        "job_id, started_at)" in printed
    )
