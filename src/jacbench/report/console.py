"""What a sweep and ``python -m jacbench.report`` print of recorded rows: each problem's table
and the recommendation, from the same functions as report.md (``report.analysis``)."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jacbench.record.text import shown_lines
from jacbench.report import analysis
from jacbench.report.display import NOISY, NOISY_LEGEND, legend_if_unsettled
from jacbench.report.problems import normalise, problems

# columns holding a number with its unit: never wrapped between the two ("942 \nus")
NUMBER_COLUMNS = {"median [95% interval]", analysis.HEADER[5], "err_eps"}


def problem_table(title: str, rows: pd.DataFrame) -> Table | None:
    """One problem's measured strategies, fastest first (``analysis.problem_lines``)."""
    lines = analysis.problem_lines(rows)
    if not lines:
        return None
    table = Table(title=title, title_justify="left")
    for name in analysis.header(rows):
        table.add_column(name, no_wrap=name in NUMBER_COLUMNS)
    for line in lines:
        table.add_row(*line)
    legends = legend_if_unsettled(lines, 5)
    legends += [NOISY_LEGEND] if any(line[4].endswith(NOISY) for line in lines) else []
    table.caption = "\n".join(legends) or None
    return table


def print_recommendations(rows: pd.DataFrame, console: Console) -> None:
    """The recommendation, one line per problem, as the report and the MLflow parent give it."""
    labelled, _ = normalise(rows)
    for title, group in problems(labelled):
        sentence = analysis.recommend(title, group).sentence().replace("**", "")
        console.print(Text(shown_lines(f"Recommended: {sentence}")))  # a name's escapes too


def print_findings(rows: pd.DataFrame, console: Console) -> None:
    """Each problem's table, then the recommendation."""
    labelled, _ = normalise(rows)
    for title, group in problems(labelled):
        table = problem_table(title, group)
        if table is not None:
            console.print(table)
    print_recommendations(rows, console)
