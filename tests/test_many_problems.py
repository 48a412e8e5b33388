"""Issue 59: a results folder of many problems, some of them jobs that failed on bad input
(no shape, no time): those are listed, never counted as panels, and the per-problem figures
are drawn with their labels inside the figure, each name on its point or led to it."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.transforms import Bbox

from helpers.point_names import crossings, drawn, misreadings, names
from helpers.results import make_result
from jacbench.record.parquet import read_results, write_result
from jacbench.report.build import CAPTIONS, write_report

STRATEGIES = {
    "jacrev": ("reverse", 1.0),
    "jacfwd": ("forward", 1.6),
    "fd_central": ("numeric", 0.7),
}


def thirty_problems(folder: Path, timed: int = 15, failed: int = 15) -> None:
    """``timed`` problems with three strategies each, ``failed`` bad-input jobs."""
    for k in range(timed):
        for j, (name, (mode, factor)) in enumerate(STRATEGIES.items()):
            approximate = name.startswith("fd")
            row = make_result(
                strategy=name,
                strategy_mode=mode,
                strategy_kind="approximate" if approximate else "exact",
                n_in=4 + k,
                n_out=6 + k,
                time_median_s=1e-4 * factor * (1 + k / 10),
                err_eps=300.0 if approximate else 2.0,
                rel_err=4e-5 if approximate else 2e-7,
                config_hash=f"c{k}{j}",
                job_id=f"{k:02d}{j:02d}" + "0" * 12,
            )
            write_result(row, folder)
    for k in range(failed):
        bad = make_result(
            model=f"bad_input_{k}",
            status="failed",
            error_message="unknown key 'model.nope'",
            n_in=None,
            n_out=None,
            time_median_s=None,
            rel_err=None,
            err_eps=None,
            within_tol=None,
            config_hash=f"bad{k}",
            job_id=f"ff{k:02d}" + "0" * 12,
        )
        write_result(bad, folder)


@pytest.mark.slow
def test_failed_jobs_of_bad_input_do_not_drop_the_per_problem_figures(tmp_path: Path):
    thirty_problems(tmp_path / "results")
    written = write_report(tmp_path / "results", tmp_path / "report")
    names = {p.name for p in written}
    assert {"time_per_strategy.png", "speed_vs_accuracy.png"} <= names
    text = (tmp_path / "report" / "report.md").read_text()
    not_drawn = text.split("Not drawn", 1)[1] if "Not drawn" in text else ""
    for name in ("time_per_strategy", "speed_vs_accuracy"):
        assert CAPTIONS[name] not in not_drawn  # no wrong "no data" reason
    assert "bad_input_3" in text  # the failed jobs are still listed


def speed_panels(rows) -> tuple[list, dict[str, str]]:
    """speed_vs_accuracy's panels of a folder or of rows, and each problem's pick."""
    from jacbench.report import plots
    from jacbench.report.analysis import recommend
    from jacbench.report.problems import normalise, problems

    rows = normalise(read_results(rows) if isinstance(rows, Path) else rows)[0]
    groups = problems(rows)
    picks = {title: plots.settled_pick(recommend(title, group)) for title, group in groups}
    return plots.timed_problems(groups), picks


@pytest.mark.slow
def test_every_point_of_thirty_problems_is_named_inside_its_panel(tmp_path: Path):
    from jacbench.report import plots

    thirty_problems(tmp_path / "results")
    panels, picks = speed_panels(tmp_path / "results")
    fig = plots.speed_vs_accuracy(panels, picks)
    assert len(fig.axes) == 15
    renderer = drawn(fig)
    for ax, (title, rows) in zip(fig.axes, panels, strict=True):
        shown = [n.text for n in names(ax, renderer)]
        assert sorted(t.replace(" (pick)", "") for t in shown) == sorted(rows["label"]), title
        assert not misreadings(ax, renderer), title
        assert not crossings(ax, renderer), title


def crowded_row(count: int = 20):
    """seed004's picture: ``count`` exact variants within 1.6x of each other at one error,
    long names among them, three approximate ones far above, the fastest settled."""
    from jacbench.report.problems import normalise

    results = []
    for i in range(count):
        name = ["jacfwd_folded", "auto", "jacrev_compiled", "functional_vectorized"][i % 4]
        results.append(
            make_result(
                strategy=f"{name}_{i}",
                strategy_mode="forward",
                time_median_s=1e-3 * (1 + 0.03 * i),
                time_iqr_s=1e-6,
                err_eps=0.3,
                job_id=f"crowd{i:02d}".ljust(16, "0"),
                config_hash=f"crowd{i}",
            )
        )
    for i, err in enumerate((4e3, 5e3, 150.0)):
        results.append(
            make_result(
                strategy=f"fd_{i}",
                strategy_kind="approximate",
                strategy_mode="numeric",
                time_median_s=1e-3 * (1.1 + 0.1 * i),
                err_eps=err,
                job_id=f"fd{i:02d}".ljust(16, "0"),
                config_hash=f"fd{i}",
            )
        )
    return normalise(pd.DataFrame([r.__dict__ for r in results]))[0]


def test_a_crowded_row_of_variants_is_named_inside_the_panel_each_name_led_to_its_point():
    """seed004's 20 strategies at one error: no name beside a point it is not the name of
    without a leader line, none outside the panel, none over another."""
    from jacbench.report import plots

    panels, picks = speed_panels(crowded_row())
    fig = plots.speed_vs_accuracy(panels, picks)
    (ax,) = fig.axes
    renderer = drawn(fig)
    shown = names(ax, renderer)
    assert len(shown) == 23
    assert not misreadings(ax, renderer)
    assert sum(n.leader is not None for n in shown) >= 10  # the crowd is led, not guessed


def test_the_picks_name_is_not_written_over_its_star():
    from jacbench.report import plots

    panels, _ = speed_panels(crowded_row(3))
    ((title, rows),) = panels
    fastest = rows.sort_values("time_median_s")["label"].iloc[0]
    fig = plots.speed_vs_accuracy(panels, {title: fastest})
    (ax,) = fig.axes
    (pick,) = [n for n in names(ax, drawn(fig)) if n.text.endswith("(pick)")]
    half = math.sqrt(plots.PICK_STYLE["s"]) / 2 * fig.dpi / 72  # the star's half width
    x, y = pick.point
    star = Bbox.from_extents(x - half, y - half, x + half, y + half)
    assert not pick.box.overlaps(star)
