"""One parquet file per job, written atomically with one explicit schema: a shared file
updated by read-modify-write loses rows under concurrent writers, one file per job none, and
a job killed mid-write leaves only a hidden temporary file, which readers ignore."""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from jacbench.record.atomic import remove_stale, write_atomic
from jacbench.record.result import Result, Status
from jacbench.record.run_ids import run_ids

if TYPE_CHECKING:
    import pandas as pd


_ARROW_TYPES: dict[type, pa.DataType] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    datetime: pa.timestamp("us", tz="UTC"),
}


def _arrow_type(hint: typing.Any) -> pa.DataType:
    if isinstance(hint, type) and issubclass(hint, Enum):
        return pa.string()
    if typing.get_origin(hint) is list:
        return pa.list_(_arrow_type(typing.get_args(hint)[0]))
    return _ARROW_TYPES[hint]


def _arrow_field(name: str, hint: typing.Any) -> pa.Field:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    nullable = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    base = args[0] if nullable else hint
    return pa.field(name, _arrow_type(base), nullable=nullable)


def _schema() -> pa.Schema:
    hints = typing.get_type_hints(Result)
    return pa.schema([_arrow_field(f.name, hints[f.name]) for f in dataclasses.fields(Result)])


SCHEMA: pa.Schema = _schema()


QUARANTINE = ".quarantine"  # unreadable result files are moved here, never deleted


def quarantine(path: Path, error: Exception) -> None:
    """Move an unreadable result file aside (so it blocks no job or report) and say so."""
    target = path.parent / QUARANTINE / path.name
    try:
        target.parent.mkdir(exist_ok=True)
        os.replace(path, target)
        where = f"moved to {target}"
    except OSError as move_error:
        where = f"left in place ({move_error.strerror})"
    print(f"jacbench: skipped unreadable result file {path} ({error}); {where}", file=sys.stderr)


IDENTITY_COLUMNS = {"status", "strategy", "model"}  # every jacbench row, old ones too


def _defaults() -> dict[str, typing.Any]:
    """Each column's value in a row that predates it: the Result field's default, "" for a text
    column without one, else null (started_at, job_id: a row without them cannot have one)."""
    values: dict[str, typing.Any] = {}
    for f in dataclasses.fields(Result):
        default = None if f.default is dataclasses.MISSING else f.default
        if default is None and SCHEMA.field(f.name).type == pa.string():
            default = ""
        values[f.name] = default.value if isinstance(default, Enum) else default
    return values


DEFAULTS = _defaults()


def read_one(path: Path) -> pa.Table | None:
    """The file's table with every column of jacbench's schema, in its types: a file of an
    earlier jacbench gets the columns it lacks with their defaults (schema evolution), its
    ``lacking_columns`` metadata naming them; None (quarantined) if it is no jacbench row."""
    try:
        table = pq.read_table(path)
        if table.schema.equals(SCHEMA):  # this jacbench's own rows: no conversion
            return table.replace_schema_metadata({"lacking_columns": ""})
        names, known = table.column_names, set(SCHEMA.names)
        lacking = sorted(IDENTITY_COLUMNS - set(names))
        if lacking:
            raise pa.ArrowInvalid(f"not a jacbench result: no {', '.join(lacking)}")
        for index, name in enumerate(names):
            if name in known:
                column = table.column(index).cast(SCHEMA.field(name).type)
                table = table.set_column(index, SCHEMA.field(name), column)
        added = [f for f in SCHEMA if f.name not in names]
        for field in added:
            column = pa.array([DEFAULTS[field.name]] * len(table), type=field.type)
            table = table.append_column(field.with_nullable(column.null_count > 0), column)
        return table.replace_schema_metadata({"lacking_columns": ",".join(f.name for f in added)})
    except (OSError, pa.ArrowException) as error:
        quarantine(path, error)
        return None


def lacking_columns(table: pa.Table) -> set[str]:
    """The columns ``read_one`` added to a file of an earlier jacbench."""
    names = (table.schema.metadata or {}).get(b"lacking_columns", b"").decode()
    return set(filter(None, names.split(",")))


def result_filename(result: Result) -> str:
    """Named so that a job's earlier results can be found by config_hash without reading."""
    stamp = result.started_at.strftime("%Y%m%dT%H%M%S")
    return f"{stamp}_{result.config_hash}_{result.job_id[:8]}.parquet"


def write_result(result: Result, folder: Path) -> Path:
    path = folder / result_filename(result)
    write_atomic(path, pa.Table.from_pylist([dataclasses.asdict(result)], schema=SCHEMA))
    remove_stale(folder.glob(".*.tmp"))
    return path


def read_files(paths: Iterable[Path]) -> pd.DataFrame:
    """The rows of these files, read one by one (an older jacbench's have fewer columns), with
    a ``_file`` column, and their MLflow run ids where noted beside them (``run_ids``)."""
    import pandas as pd  # only where rows are read back: a single run never needs it

    tables, missing, linked = [], set(), {}
    for path in paths:
        table = read_one(path)
        if table is None:
            continue
        missing |= lacking_columns(table)
        if path.parent not in linked:
            linked[path.parent] = run_ids(path.parent)
        tables.append(table.append_column("_file", pa.array([str(path)] * len(table))))
    if not tables:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in [*SCHEMA.names, "_file"]})
    frame = pa.concat_tables(tables, promote_options="default").to_pandas(
        types_mapper=pd.ArrowDtype
    )
    runs = {job: run for ids in linked.values() for job, run in ids.items()}
    if runs:
        column = frame["mlflow_run_id"]
        noted = [run or runs.get(job, "") for run, job in zip(column, frame["job_id"], strict=True)]
        frame["mlflow_run_id"] = pd.Series(noted, index=frame.index, dtype=column.dtype)
    frame.attrs["missing_columns"] = sorted(missing)  # lacking in some (older) files
    return frame


def read_results(folder: Path) -> pd.DataFrame:
    """Every job's row under ``folder`` (missing columns of older files come back empty)."""
    frame = read_files(sorted(Path(folder).glob("*.parquet")))
    return frame.drop(columns="_file")  # attrs (missing_columns) are kept


DONE_STATUSES = (Status.OK, Status.SKIPPED)  # settled outcomes; a failed job is worth another try


def done_rows(folder: Path, config_hash: str) -> Iterator[tuple[Path, dict[str, typing.Any]]]:
    """Newest first, each file under ``folder`` whose row for this config_hash is ``ok`` or
    ``skipped`` (settled outcomes), with its row (every column; defaults where it lacks one)."""
    for path in sorted(Path(folder).glob(f"*_{config_hash}_*.parquet"), reverse=True):
        table = read_one(path)
        if table is None or table.num_rows != 1:
            continue
        row = table.to_pylist()[0]
        if row.get("status") in DONE_STATUSES:
            yield path, row


def write_table(path: Path, rows: pd.DataFrame, schema: pa.Schema) -> None:
    """Write ``rows`` with exactly ``schema``; columns it lacks are written empty."""
    frame = rows.reindex(columns=schema.names)
    columns = [pa.array(frame[f.name].tolist(), type=f.type, from_pandas=True) for f in schema]
    write_atomic(path, pa.Table.from_arrays(columns, schema=schema))
