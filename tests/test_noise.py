"""torch.utils.benchmark's spread warning is kept: a column, a mark in the console and report
tables, and never a settled winner in the recommendation (issue 13)."""

from __future__ import annotations

import pandas as pd
from torch.utils import benchmark

from conftest import make_result
from jacbench.report.analysis import problem_lines, recommend
from jacbench.report.build import write_report
from jacbench.report.display import NOISY, summary_table
from jacbench.report.problems import normalise, problems
from jacbench.timing.measure import spread_warning

WARNING = "Interquartile range is 40.0% of the median measurement. This could indicate..."


def measurement(times: list[float]) -> benchmark.Measurement:
    return benchmark.Measurement(1, times, benchmark.utils.common.TaskSpec("f(x)", ""))


def test_the_column_is_torch_benchmarks_own_warning_on_one_line():
    noisy = spread_warning(measurement([1.0, 1.5, 0.7, 1.2, 2.0, 0.5]))
    assert noisy.startswith("Interquartile range is") and "% of the median" in noisy
    assert "\n" not in noisy and "WARNING" not in noisy
    assert spread_warning(measurement([1.0, 1.01, 0.99, 1.0, 1.0, 1.02])) == ""


def rows(*jobs: tuple[str, float, str]) -> pd.DataFrame:
    frame = pd.DataFrame(
        [
            make_result(
                strategy=name,
                time_median_s=seconds,
                time_iqr_s=seconds * 0.02,
                timing_warning=warning,
                config_hash=name,
                job_id=f"{i:016d}",
            ).__dict__
            for i, (name, seconds, warning) in enumerate(jobs)
        ]
    )
    return normalise(frame)[0]


def test_a_noisy_fastest_strategy_is_not_presented_as_the_winner():
    group = rows(("jacfwd", 1e-5, WARNING), ("jacrev", 2e-5, ""))
    ((title, group),) = problems(group)
    sentence = recommend(title, group).sentence()
    assert "no settled winner" in sentence and "jacfwd is noisy" in sentence
    assert "use **" not in sentence
    lines = {line[0]: line for line in problem_lines(group)}
    assert lines["jacfwd"][4].endswith(NOISY) and not lines["jacrev"][4].endswith(NOISY)


def test_medians_closer_than_their_spread_are_a_tie_and_distant_ones_a_winner():
    ((title, close),) = problems(rows(("jacfwd", 1.00e-5, ""), ("jacrev", 1.01e-5, "")))
    assert "within their spread" in recommend(title, close).sentence()
    ((title, apart),) = problems(rows(("jacfwd", 1e-5, ""), ("jacrev", 2e-5, "")))
    assert recommend(title, apart).sentence().startswith(f"{title}: use **jacfwd**")


def test_marks_in_the_sweep_summary_and_the_report(tmp_path):
    group = rows(("jacfwd", 1e-5, WARNING), ("jacrev", 2e-5, ""))
    summary = summary_table(group.assign(job_num=[0, 1], resumed=False), [])
    assert summary.caption and NOISY in summary.caption
    assert any(NOISY in cell for cell in summary.columns[6]._cells)
    md, _ = write_report(group, tmp_path)[:2]
    text = md.read_text()
    assert f"1.000e-05 {NOISY}" in text and "no settled winner" in text
