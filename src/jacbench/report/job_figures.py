"""Each problem's time figure on its own, for the job runs of that problem in MLflow (a
reviewer opening one job sees where it stands among the strategies of its problem)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from jacbench.report import plots
from jacbench.report.analysis import recommend
from jacbench.report.problems import normalise, problems

# At most this many problems get a figure on their job runs (a larger sweep: slow to draw).
MOST_PROBLEMS = 12


def time_figures(rows: pd.DataFrame, out: Path, most: int = MOST_PROBLEMS) -> dict[str, Path]:
    """job_id -> its problem's time-per-strategy PNG in ``out``; none past ``most`` problems."""
    rows, _ = normalise(rows)
    found = problems(rows)
    if len(found) > most:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for number, (title, group) in enumerate(found, start=1):
        pick = plots.settled_pick(recommend(title, group))
        fig = plots.time_per_strategy([(title, group)], {title: pick})
        if fig is None:
            continue
        path = out / f"time_per_strategy_{number}.png"
        fig.savefig(path, dpi=plots.DPI)
        plt.close(fig)
        paths.update(dict.fromkeys(group["job_id"].astype(str), path))
    return paths
