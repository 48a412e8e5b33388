"""Faults that must not lose or block measurements: unreadable result files, file modes on
shared folders, timing settings that would hang a job."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import make_result
from jacbench.config import TimingConfig
from jacbench.errors import ConfigError
from jacbench.recorders.parquet import (
    QUARANTINE,
    find_done_result,
    read_results,
    result_filename,
    write_result,
)


def test_result_files_honour_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_result(make_result(), tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # mkstemp alone gives 0600


def test_a_truncated_file_blocks_neither_the_job_nor_the_report(tmp_path: Path, capsys) -> None:
    good = write_result(make_result(), tmp_path)
    other = make_result(config_hash="deadbeef0000")
    bad = tmp_path / result_filename(other)
    bad.write_bytes(good.read_bytes()[:50])  # truncated, named with a job's hash
    assert find_done_result(tmp_path, "deadbeef0000") is None  # the job runs again
    assert (tmp_path / QUARANTINE / bad.name).exists() and not bad.exists()  # moved, not deleted
    assert str(bad) in capsys.readouterr().err
    assert len(read_results(tmp_path)) == 1


def test_a_type_conflicting_file_is_skipped_and_named(tmp_path: Path, capsys) -> None:
    write_result(make_result(), tmp_path)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"n_in": ["many"], "status": [3]}), foreign)
    rows = read_results(tmp_path)
    assert len(rows) == 1
    assert "foreign.parquet" in capsys.readouterr().err
    assert (tmp_path / QUARANTINE / "foreign.parquet").exists()


@pytest.mark.parametrize(
    "setting",
    [{"min_run_time": math.inf}, {"min_run_time": 1e9}, {"warmup": 10**9}, {"threads": 10**6}],
)
def test_every_timing_setting_is_bounded(setting: dict) -> None:
    with pytest.raises(ConfigError, match=f"timing.{next(iter(setting))} must be"):
        TimingConfig(**setting)
