"""Rows a report cannot use (NaN or negative times, unknown statuses, copies of a row) are
skipped and named, never a traceback: a result folder may hold hand-edited or foreign files."""

from __future__ import annotations

import math
import sys
from collections import defaultdict

import pandas as pd

from jacbench.record.result import Status

STATUSES = {s.value for s in Status}


def _why_unusable(row: pd.Series) -> str:
    """Why a row cannot be reported ("" when it can)."""
    status = row.get("status")
    if status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(sorted(STATUSES))}"
    if status != Status.OK:
        return ""
    median, spread = _number(row.get("time_median_s")), _number(row.get("time_iqr_s", 0.0))
    if math.isnan(median) and untimed(row):
        return ""  # timing=none: an accuracy question, judged without a time
    if math.isnan(median):
        return "an ok row without a time (no time_median_s: an older jacbench's, or edited?)"
    if not (math.isfinite(median) and median > 0):
        return f"an ok row whose time_median_s is {median}"
    if math.isfinite(spread) and spread < 0:
        return f"an ok row whose time_iqr_s is negative ({spread})"
    return ""


def untimed(row: pd.Series) -> bool:
    """A row of an accuracy question (``timing=none``): it declares that no call was timed."""
    return _number(row.get("n_timed")) == 0


def _number(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]  # any cell: what float() refuses is caught
    except (TypeError, ValueError):
        return math.nan


def screen(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a report can use; the others are named on stderr, one line per reason."""
    if rows.empty:
        return rows
    skipped: dict[str, list[str]] = defaultdict(list)
    if "job_id" in rows.columns:
        repeated = rows["job_id"].notna() & rows.duplicated("job_id")
        for job_id in rows.loc[repeated, "job_id"]:
            skipped["copies of a row already counted"].append(f"job {job_id}")
        rows = rows[~repeated]
    keep = []
    for _, row in rows.iterrows():
        why = _why_unusable(row)
        keep.append(not why)
        if why:
            skipped[why].append(f"{row.get('strategy', '?')} on {row.get('model', '?')}")
    for why, which in skipped.items():
        shown = ", ".join(which[:5]) + (f" and {len(which) - 5} more" if len(which) > 5 else "")
        print(f"jacbench: skipped {len(which)} row(s), {why}: {shown}", file=sys.stderr)
    return rows[keep].reset_index(drop=True) if len(keep) else rows
