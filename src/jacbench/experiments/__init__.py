"""The forum questions as experiments. Each module has ``answer(rows) -> str``, called at the
end of its sweep with the recorded rows of that sweep (never the live objects), and its
preset in conf/experiment/ (``python -m jacbench +experiment=seed00K``)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import torch

from jacbench.core.numerics import machine_eps, parse_dtype
from jacbench.record.result import Status
from jacbench.report.problems import latest_ok, normalise, problems, standing

MACHINE_EPS = {name: machine_eps(parse_dtype(name)) for name in ("float32", "float64")}


def ok_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows, the newest of each measured config (``config_hash``): a preset's
    side-by-side re-timing replaces its first-round rows, as in every verdict."""
    ok = rows[rows["status"] == Status.OK]
    if "config_hash" not in ok or "started_at" not in ok:
        return ok.copy()
    key = ok["config_hash"].where(ok["config_hash"].astype(str) != "", ok.index.astype(str))
    newest = ok.assign(_key=key).sort_values("started_at", kind="stable").groupby("_key").tail(1)
    return ok.loc[newest.index.sort_values()].copy()


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows, the newest of each variant, each problem's fastest first (``standing``)."""
    labelled, _ = normalise(rows)
    found = [standing(group, latest_ok) for _, group in problems(labelled)]
    return pd.concat(found) if found else labelled.iloc[:0]


def option(row: pd.Series, group: str, key: str, default: Any = None) -> Any:
    """A model or strategy option of a recorded row (from its JSON column)."""
    return json.loads(row[f"{group}_options"]).get(key, default)


def jacobian(row: pd.Series) -> torch.Tensor:
    """The recorded Jacobian of a row, as float64, shaped (batch?, n_out, n_in)."""
    values = torch.tensor(list(row["jacobian"]), dtype=torch.float64)
    shape = (int(row["n_out"]), int(row["n_in"]))
    return values.reshape(shape if int(row["batch"]) == 1 else (int(row["batch"]), *shape))


def table(header: list[str], lines: list[list[str]]) -> str:
    """A plain-text table, left-aligned (the answer goes to a terminal and answer.md alike)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *lines, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*map(str, line)) for line in [header, *lines])
