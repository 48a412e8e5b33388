"""The Result record, its parquet schema, atomic writes and the config hash."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from helpers.cli import compose_job
from helpers.results import make_result
from jacbench.record.parquet import SCHEMA, read_results, write_result
from jacbench.record.result import COLUMNS, Result
from jacbench.run.identity import config_hash

REQUIRED = {
    "model": pa.string(),
    "strategy": pa.string(),
    "strategy_kind": pa.string(),
    "dtype": pa.string(),
    "device": pa.string(),
    "n_in": pa.int64(),
    "n_out": pa.int64(),
    "batch": pa.int64(),
    "status": pa.string(),
    "error_message": pa.string(),
    "time_median_s": pa.float64(),
    "time_iqr_s": pa.float64(),
    "n_timed": pa.int64(),
    "first_call_s": pa.float64(),
    "peak_mem_bytes": pa.int64(),
    "max_abs_err": pa.float64(),
    "rel_err": pa.float64(),
    "err_eps": pa.float64(),
    "within_tol": pa.bool_(),
    "config_hash": pa.string(),
    "mlflow_run_id": pa.string(),
    "torch_version": pa.string(),
    "started_at": pa.timestamp("us", tz="UTC"),
}


def test_schema_has_the_documented_columns_and_types():
    for name, type_ in REQUIRED.items():
        assert SCHEMA.field(name).type == type_, name
    assert [f.name for f in dataclasses.fields(Result)] == COLUMNS


def test_write_is_atomic_and_round_trips(tmp_path: Path):
    path = write_result(make_result(), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind
    assert pq.read_schema(path).equals(SCHEMA, check_metadata=False)
    row = read_results(tmp_path).iloc[0]
    assert row["strategy"] == "jacrev" and row["n_timed"] == 100 and bool(row["within_tol"])


def test_temporary_files_a_kill_left_are_cleaned(tmp_path: Path):
    """Issue 32: SIGKILLs landing mid-write left `.tmp` files that were never cleaned."""
    import os
    import time

    from jacbench.record.atomic import STALE_TMP_S

    old, fresh = tmp_path / ".a.parquet.x1.tmp", tmp_path / ".b.parquet.x2.tmp"
    for tmp in (old, fresh):
        tmp.write_bytes(b"half a row")
    then = time.time() - 2 * STALE_TMP_S
    os.utime(old, (then, then))
    write_result(make_result(), tmp_path)
    assert not old.exists() and fresh.exists()  # fresh: perhaps a writer at work


def test_failed_rows_with_empty_metrics_read_back_next_to_ok_rows(tmp_path: Path):
    write_result(make_result(), tmp_path)
    failed = make_result(
        status="failed",
        error_message="boom",
        job_id="ffff" * 4,
        n_in=None,
        time_median_s=None,
        within_tol=None,
        peak_mem_bytes=None,
    )
    write_result(failed, tmp_path)
    frame = read_results(tmp_path)
    assert sorted(frame["status"]) == ["failed", "ok"]
    bad = frame[frame["status"] == "failed"].iloc[0]
    assert bad["error_message"] == "boom"
    assert pd.isna(bad["time_median_s"]) and pd.isna(bad["within_tol"])


def test_older_files_with_fewer_columns_still_read(tmp_path: Path):
    write_result(make_result(), tmp_path)
    old = pa.Table.from_pylist([{"model": "mlp", "strategy": "functional", "status": "ok"}])
    pq.write_table(old, tmp_path / "old.parquet")
    frame = read_results(tmp_path)
    assert len(frame) == 2 and set(frame["strategy"]) == {"jacrev", "functional"}


def test_config_hash_is_stable_and_covers_what_is_measured_only():
    base = config_hash(compose_job("strategy=fd_central"))
    assert base == config_hash(compose_job("strategy=fd_central"))
    assert base == config_hash(compose_job("strategy=fd_central", "results_dir=elsewhere"))
    assert base != config_hash(compose_job("strategy=fd_central", "strategy.eps=1e-4"))
    assert base != config_hash(compose_job("strategy=fd_central", "dtype=float64"))
    assert base != config_hash(compose_job("strategy=fd_central", "model.hidden=8"))


def test_rows_of_an_earlier_jacbench_read_with_every_column_and_its_default(tmp_path: Path):
    """Issue 46 (D2): schema evolution, so that summaries and reports over a folder that mixes
    versions can be written with the current schema (non-nullable text columns included)."""
    from jacbench.record.parquet import write_table
    from jacbench.run.sweep.summary import SUMMARY_SCHEMA

    write_result(make_result(tier="compiled"), tmp_path)
    row = {k: v for k, v in dataclasses.asdict(make_result()).items()}
    for name in ("tier", "decided_by", "n_blocks", "time_blocks_s"):
        del row[name]
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "earlier.parquet")
    frame = read_results(tmp_path)
    assert list(frame.columns) == COLUMNS
    assert sorted(frame["tier"]) == ["", "compiled"] and list(frame["decided_by"]) == ["", ""]
    assert frame["n_blocks"].isna().sum() == 1
    assert {"tier", "decided_by", "n_blocks", "time_blocks_s"} <= set(
        frame.attrs["missing_columns"]
    )
    frame["job_num"], frame["resumed"] = [0, 1], [True, False]
    write_table(tmp_path / "summary.parquet", frame, SUMMARY_SCHEMA)  # ArrowInvalid before
