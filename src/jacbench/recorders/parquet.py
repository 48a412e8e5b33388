"""One parquet file per job, written atomically with one explicit schema.

A shared file updated by read-modify-write loses rows under concurrent writers; one file per
job, written to a temporary name and renamed, loses none and is never read half-written.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from jacbench.result import SCHEMA, Result


def write_result(result: Result, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([dataclasses.asdict(result)], schema=SCHEMA)
    stamp = result.started_at.strftime("%Y%m%dT%H%M%S")
    final = folder / f"{stamp}_{result.config_hash}_{result.job_id[:8]}.parquet"
    tmp = folder / f".{final.name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, final)
    return final


def read_results(folder: Path) -> pd.DataFrame:
    """Every job's row under ``folder``. Files are read one by one, so files written by an
    older jacbench (fewer columns) still load; missing columns come back empty."""
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in SCHEMA.names})
    tables = [pq.read_table(f) for f in files]
    table = pa.concat_tables(tables, promote_options="default")
    return table.to_pandas(types_mapper=pd.ArrowDtype)
