"""The map (``+experiment=map``): which strategy wins where over a grid of N inputs by M
outputs, per model family and dtype, where the textbook rule loses, and how close ``auto``
comes to the best exact strategy (``jacbench.report.grid``)."""

from __future__ import annotations

import pandas as pd

from jacbench.experiments import table
from jacbench.record.result import Status
from jacbench.report import grid
from jacbench.report.heatmaps import short
from jacbench.report.problems import normalise


def _winners(cells: list[grid.Cell]) -> list[str]:
    """Each family's winners as a text grid: M down (largest first), N across."""
    out = []
    for family, found in grid.by_family(cells).items():
        xs, ys = sorted({c.x for c in found}), sorted({c.y for c in found}, reverse=True)
        at = {(c.x, c.y): c for c in found}

        def text(c: grid.Cell | None) -> str:
            if c is None:
                return "."
            if c.winner:
                return short(c.winner)
            tied = "/".join(map(short, c.tied)) or "-"
            return f"{tied} ({c.winner_why})" if c.winner_why else tied

        lines = [[f"M={y:g}", *(text(at.get((x, y))) for x in xs)] for y in ys]
        out += [
            f"{family}: the settled winner, or the two leaders (why none settled)",
            table(["", *(f"N={x:g}" for x in xs)], lines),
            "",
        ]
    return out


def _failures(rows: pd.DataFrame) -> list[str]:
    """How many jobs failed, with the commonest message (their cells stay empty)."""
    failed = rows[rows["status"] == Status.FAILED]
    if failed.empty:
        return []
    message = failed["error_message"].fillna("").value_counts().index[0][:200]
    counted = f"{len(failed)} of {len(rows)} jobs failed, their cells left empty"
    return [f"{counted} (most often: {message})"]


def answer(rows: pd.DataFrame) -> str:
    normalised, _ = normalise(rows)
    failures = _failures(normalised)
    if failures and bool((normalised["status"] == Status.FAILED).all()):
        return "map: nothing to answer: " + failures[0]
    axes, cells = grid.cells(normalised)
    if axes is None or not cells:  # no axes: no cells either
        return "map: no cells with two numeric axes were recorded."
    names = sorted({c.winner for c in cells if c.winner} | {t for c in cells for t in c.tied})
    n_families = len({c.family for c in cells})
    lines = [
        f"map: the fastest Jacobian strategy per cell of {grid.axis_name(axes[0])} x "
        f"{grid.axis_name(axes[1])}, {n_families} {'family' if n_families == 1 else 'families'}",
        *_winners(cells),
        "codes: " + ", ".join(f"{short(n)} = {n}" for n in names),
        *(f"- {line}" for line in [*failures, *grid.summarise(axes, cells).lines()]),
        "Answer: see the heat maps in the sweep's report (map_winner, map_forward_over_reverse, "
        "map_auto_regret); a cell names a winner only where the rule settles it.",
    ]
    return "\n".join(lines)
