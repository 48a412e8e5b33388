"""``write_report``: a results folder (or rows) to report.md, report.html and PNG plots."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from jacbench.record.parquet import read_results
from jacbench.record.result import Status
from jacbench.report import analysis, environment, grid, heatmaps, plots
from jacbench.report.display import NOISY, NOISY_LEGEND, legend_if_unsettled
from jacbench.report.problems import normalise, problems
from jacbench.report.render import Document
from jacbench.report.screen import screen

CAPTIONS = {
    "time_per_strategy": (
        "Median time per Jacobian for each strategy and problem (bar: 95% interval of the "
        "median; colour and marker: exact or approximate; star: the recommended strategy)"
    ),
    "accuracy_per_strategy": "Error in rounding units (err_eps) per strategy and dtype",
    "speed_vs_accuracy": "Speed against accuracy per problem, one named point per strategy",
    "fd_error_vs_eps": "Finite-difference error against the step eps",
    "time_vs_shape": "Best forward- and reverse-mode time against N/M",
    "sparsity_pattern": "Nonzeros of a Jacobian computed by a sparse strategy, with its colours",
    "map_winner": (
        "The settled winner per cell of the sweep's two axes (auto left out; grey and hatched: "
        "not settled, labelled with the best two and why; dashed: M = N)"
    ),
    "map_forward_over_reverse": (
        "Best forward-mode over best reverse-mode time per cell (blue: forward faster; framed "
        "and bold: settled by the rule; grey and hatched: not settled, why in place of a ratio)"
    ),
    "map_auto_regret": (
        f"auto's time over the best exact strategy's per cell (framed: auto settled slower by "
        f"more than {grid.REGRET_BOUND:.2f}x; hatched: not settled, and below "
        f"{1 / grid.REGRET_BOUND:.2f} greyed, why in place of a value; a settled value below "
        "it is marked a measurement artefact)"
    ),
}


def write_report(source: Path | pd.DataFrame, out: Path) -> list[Path]:
    """The report of a results folder (or rows) into ``out``, nothing re-run; returns its files."""
    rows = read_results(Path(source)) if not isinstance(source, pd.DataFrame) else source
    rows = screen(rows)
    out.mkdir(parents=True, exist_ok=True)
    doc = Document("jacbench report")
    if rows.empty:
        doc.paragraph("The result set is empty: nothing was recorded.")
        return list(doc.write(out))
    rows, missing = normalise(rows)
    groups = problems(rows)
    counts = rows["status"].value_counts().to_dict()
    doc.paragraph(
        f"{len(rows)} recorded jobs ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})"
        f" on {len(groups)} problem(s), {rows['strategy'].nunique()} strategy(ies)."
    )
    if missing:
        doc.paragraph(
            "Columns missing from (older) result files, shown empty: " + ", ".join(missing) + "."
        )
    if rows["strategy"].nunique() == 1:
        doc.paragraph("Only one strategy was measured: there is nothing to compare it with.")

    doc.heading("Recommendation")
    answered = sorted(groups, key=lambda g: not (g[1]["status"] == Status.OK).any())
    doc.bullets([analysis.recommend(title, group).sentence() for title, group in answered])
    doc.paragraph(analysis.RULE)
    rules = analysis.rules_of_thumb(groups)
    if rules:
        doc.heading("Rules of thumb", 3)
        doc.bullets(rules)
    axes, cells = grid.cells(rows)
    summary = grid.summarise(axes, cells).lines()
    if summary:
        doc.heading("The map", 3)
        doc.bullets(summary)

    written, shown = [], []
    figures = {**plots.all_plots(rows, groups), **heatmaps.heat_maps(axes, cells)}
    for name, fig in figures.items():
        path = out / f"{name}.png"
        fig.savefig(path, dpi=plots.DPI)
        fig.savefig(path.with_suffix(".svg"))  # the same figure, to zoom or print
        shown.append((path, plots.display_width(fig)))
        plt.close(fig)
        written += [path, path.with_suffix(".svg")]

    doc.heading("Problems")
    for title, group in groups:
        doc.heading(title, 3)
        lines = analysis.problem_lines(group)
        if lines:
            doc.table(analysis.header(group), lines)
            if any(line[4].endswith(NOISY) for line in lines):
                doc.paragraph(NOISY_LEGEND)
            for legend in legend_if_unsettled(lines, 5):
                doc.paragraph(legend)
        bad = analysis.not_ok_lines(group)
        if bad:
            doc.paragraph("Failed or skipped:")
            doc.table(["strategy", "status", "reason"], bad)

    doc.heading("Plots")
    for path, width in shown:
        doc.image(path, CAPTIONS[path.stem], width)
    n_timed = len(plots.timed_problems(groups))
    too_many = n_timed > plots.MAX_PROBLEM_PANELS
    per_problem = ("time_per_strategy", "speed_vs_accuracy") if too_many else ()
    absent = [CAPTIONS[n] for n in CAPTIONS if n not in figures and n not in per_problem]
    if too_many:
        doc.paragraph(
            f"Figures with a panel per problem are drawn for up to {plots.MAX_PROBLEM_PANELS} "
            f"problems; this result set has {n_timed} with timed rows (the tables above and "
            "any map cover them)."
        )
    if absent:
        doc.paragraph("Not drawn (no data for them in this result set): " + "; ".join(absent))
    doc.heading("Environment")
    doc.paragraph("Where the rows were measured (compare ratios, not times, across lines):")
    doc.table(environment.HEADER, environment.environment_lines(rows))
    return [*doc.write(out), *written]
