"""Before a preset names a winner, its top candidates are timed again side by side.

The jobs of a sweep run one after another, and a machine's load changes between them: two
jobs of the same code measured minutes apart can differ 3x. So for each problem of a preset
the two fastest usable strategies (within tolerance) are prepared again in the launching
process and timed interleaved (``jacbench.timing.measure.side_by_side``); their rows' time
columns are replaced by those figures, marked ``timed_side_by_side``, for the answer, the
report and the MLflow parent. The recorded per-job rows (parquet, child runs) are unchanged.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pandas as pd
import torch

from jacbench.core.numerics import parse_dtype
from jacbench.core.problem import build_problem
from jacbench.core.registry import Registry
from jacbench.report.problems import good, normalise, problems
from jacbench.run.job import resolve_device
from jacbench.timing.measure import Timing, side_by_side, torch_threads

TOP = 2  # candidates re-timed per problem


def retime_top(rows: pd.DataFrame, registry: Registry) -> tuple[pd.DataFrame, list[str]]:
    """``rows`` with the top candidates of each problem re-timed side by side, and one line
    per problem saying what was re-timed (or why it could not be)."""
    rows = rows.copy()
    rows["timed_side_by_side"] = False
    labelled, _ = normalise(rows)
    lines = []
    for title, group in problems(labelled):
        usable = good(group).dropna(subset=["time_median_s"])
        top = _distinct(usable).sort_values("time_median_s")[:TOP]
        if len(top) < TOP:
            continue
        try:
            timings = _retime(top, registry)
        except Exception as exc:  # the sweep's own figures stand; the answer says so
            lines.append(f"{title}: not re-timed side by side ({type(exc).__name__}: {exc})")
            continue
        for index, timing in timings.items():
            for field, value in dataclasses.asdict(timing).items():
                rows[field] = rows[field].astype(object)
                rows.loc[[index], field] = pd.Series([value], index=[index], dtype=object)
            rows.loc[index, "timed_side_by_side"] = True
        names = ", ".join(str(top.loc[i, "label"]) for i in timings)
        blocks = next(iter(timings.values())).n_blocks
        lines.append(f"{title}: {names} re-timed side by side ({blocks} interleaved blocks each)")
    return rows, lines


def _distinct(rows: pd.DataFrame) -> pd.DataFrame:
    """Candidates running different code: ``auto`` is left out where the strategy it chose
    was measured too (timing the same code twice settles nothing)."""
    measured = set(rows["strategy"])
    return rows[~((rows["strategy"] == "auto") & rows["chosen_strategy"].isin(measured))]


def _retime(top: pd.DataFrame, registry: Registry) -> dict[Any, Timing]:
    """The rows' strategies prepared on their (shared) problem, timed interleaved."""
    first = top.iloc[0]
    problem = build_problem(
        json.loads(first["model_options"]),
        parse_dtype(str(first["dtype"])),
        resolve_device(str(first["device"])),
        int(first["seed"]),
    )
    calls = {}
    for index, row in top.iterrows():
        options = json.loads(row["strategy_options"])
        prep = registry.prepare(str(row["strategy"]), problem, **options)
        calls[index] = lambda prep=prep: prep(problem.x)
    with torch_threads(int(first["threads"])), torch.no_grad():
        return side_by_side(calls)
