"""Issue 59: a results folder of many problems, some of them jobs that failed on bad input
(no shape, no time): those are listed, never counted as panels, and the per-problem figures
are drawn with their labels inside the figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.results import make_result
from jacbench.record.parquet import write_result
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
