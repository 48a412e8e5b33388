"""Where a report's rows were measured: torch, device, CPU, threads, jacbench's version and
code digest, one line per distinct set (from the rows alone, never from this process)."""

from __future__ import annotations

import pandas as pd

from jacbench.report.display import missing

COLUMNS = {
    "torch": "torch_version",
    "device": "device",
    "device name": "device_name",
    "CPU": "cpu_model",
    "threads": "threads",
    "jacbench": "jacbench_version",
    "code digest": "code_digest",
    "host": "hostname",
}
HEADER = [*COLUMNS, "jobs"]


def _text(value: object) -> str:
    return "-" if missing(value) else str(value) or "-"


def environment_lines(rows: pd.DataFrame) -> list[list[str]]:
    """One line per distinct environment among ``rows``, with how many jobs ran in it."""
    cells = pd.DataFrame(
        {
            name: [_text(v) for v in rows[col]] if col in rows else ["-"] * len(rows)
            for name, col in COLUMNS.items()
        }
    )
    if cells.empty:
        return []
    counted = cells.groupby(list(COLUMNS), sort=True).size().reset_index(name="jobs")
    return [[str(v) for v in line] for line in counted.itertuples(index=False)]
