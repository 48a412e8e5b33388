"""What a person reads on the console (issue 44): the report command prints the tables and
the recommendation, numbers stay with their units, one unit and one digit rule per cell, no
verdict word in a number column, nothing cut mid-word, auto's tier shown."""

from __future__ import annotations

import pandas as pd
from rich.console import Console

from helpers.results import make_result
from jacbench.record.parquet import write_result
from jacbench.report.__main__ import main as report_main
from jacbench.report.analysis import recommend
from jacbench.report.console import problem_table
from jacbench.report.display import result_table, summary_table
from jacbench.report.problems import normalise, problems
from jacbench.timing.rule import Interval


def rows() -> pd.DataFrame:
    return normalise(
        pd.DataFrame(
            [
                make_result(strategy="jacrev", time_median_s=942e-6, job_id="a" * 16).__dict__,
                make_result(
                    strategy="jacfwd",
                    strategy_mode="forward",
                    time_median_s=2.5e-3,
                    job_id="b" * 16,
                    config_hash="b",
                ).__dict__,
            ]
        )
    )[0]


def rendered(renderable, width: int = 70) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_the_report_command_prints_each_problems_table_and_the_recommendation(tmp_path, capsys):
    results = tmp_path / "results"
    for _, row in rows().iterrows():
        fields = {k: v for k, v in row.items() if k not in ("label",)}
        write_result(
            make_result(**{k: fields[k] for k in fields if k in make_result().__dict__}), results
        )
    assert report_main([str(results), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "median [95% interval]" in out and "942 us [923-961]" in out
    assert "Recommended: mlp (N=3, M=2) float32 cpu: use jacrev (942 us)" in out
    assert "written: " in out and "report.md" in out


def test_a_number_never_wraps_away_from_its_unit_in_a_narrow_terminal():
    ((title, group),) = problems(rows())
    text = rendered(problem_table(title, group), width=60)
    assert "942 us [923-961]" in text  # on one line, not "942 \\nus"
    summary = rendered(summary_table(group.assign(job_num=[0, 1], resumed=False), []), 60)
    assert "942 us [923-961]" in summary


def test_one_unit_and_one_digit_rule_in_a_cell():
    assert Interval("a", 1.15e-3, 1.10e-3, 1.6e-3, 10).text() == "1.15 ms [1.10-1.60]"
    assert Interval("a", 59.7e-6, 57.21e-6, 63.3e-6, 10).text() == "59.7 us [57.2-63.3]"
    result = make_result(time_median_s=2.41e-3, time_iqr_s=2.0e-4, first_call_s=0.2052)
    text = rendered(result_table(result), width=120)
    assert "IQR 0.20 ms" in text and "e-04 s" not in text
    assert "first call     │ 205 ms" in text or "205 ms  (setup" in text


def test_nothing_is_cut_mid_word_and_no_default_is_named_that_was_not_run():
    reason = "analytic applies only to models that define analytic_jacobian(x); mlp has none"
    failed = make_result(strategy="analytic", status="skipped", error_message=reason)
    frame = normalise(pd.DataFrame([failed.__dict__]))[0].assign(job_num=[0], resumed=False)
    text = " ".join(rendered(summary_table(frame, []), width=200).split())
    assert "define analytic_jacobian(x); mlp has none" in text
    ((title, group),) = problems(rows())
    assert "was not measured" not in recommend(title, group).sentence()


def test_a_single_auto_run_shows_its_tier():
    result = make_result(strategy="auto", chosen_strategy="jacfwd_folded", tier="compiled")
    text = " ".join(rendered(result_table(result), width=200).split())
    assert "chose jacfwd_folded" in text and "tier compiled" in text
