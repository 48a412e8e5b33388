"""Timing that knows its spread and the one rule for "A beats B" (issue 26): every job times at
least MIN_BLOCKS blocks and keeps them, a time without an interval decides nothing, and the
answers, report, recommendation, parent run and compare all follow the rule."""

from __future__ import annotations

import random

import pandas as pd
import pytest
import torch
from torch.utils import benchmark

from helpers.results import frame, timed_row
from jacbench.experiments import seed003, seed004
from jacbench.report.analysis import problem_lines, recommend
from jacbench.report.build import write_report
from jacbench.report.compare import compare
from jacbench.report.display import NOISY, summary_table
from jacbench.report.overview import overview
from jacbench.report.problems import problems
from jacbench.timing.config import TimingConfig
from jacbench.timing.measure import spread_warning, time_steady_state
from jacbench.timing.rule import (
    MIN_BLOCKS,
    Order,
    compare_times,
    contention,
    interval_of,
    median_interval,
)

WARNING = "Interquartile range is 40.0% of the median measurement. This could indicate..."


def measurement(times: list[float]) -> benchmark.Measurement:
    return benchmark.Measurement(1, times, benchmark.utils.common.TaskSpec("f(x)", ""))


def test_the_warning_column_is_torch_benchmarks_own_warning_on_one_line():
    noisy = spread_warning(measurement([1.0, 1.5, 0.7, 1.2, 2.0, 0.5]))
    assert noisy.startswith("Interquartile range is") and "% of the median" in noisy
    assert "\n" not in noisy and "WARNING" not in noisy
    assert spread_warning(measurement([1.0, 1.01, 0.99, 1.0, 1.0, 1.02])) == ""


def test_the_median_interval_covers_the_median_as_often_as_it_says():
    rng = random.Random(0)
    for n in (MIN_BLOCKS, 10, 30):
        covered = 0
        for _ in range(2000):
            blocks = [rng.lognormvariate(0, 0.5) for _ in range(n)]  # true median 1.0
            low, high = median_interval(blocks)
            covered += low <= 1.0 <= high
        assert covered / 2000 >= 0.94, n


def test_every_timing_keeps_at_least_min_blocks_even_when_one_call_outlasts_min_run_time():
    # timing=quick (10 ms) on a call of ~20 ms: blocked_autorange returned one block here
    slow = torch.randn(500, 500)

    def call(x: torch.Tensor) -> torch.Tensor:
        for _ in range(8):
            x = torch.tanh(x @ slow)
        return x

    timing = time_steady_state(call, torch.randn(500, 500), TimingConfig(0.01, 0, 1))
    assert timing.n_blocks >= MIN_BLOCKS and len(timing.time_blocks_s) == timing.n_blocks
    assert timing.time_ci_low_s <= timing.time_median_s <= timing.time_ci_high_s
    assert timing.time_ci_low_s < timing.time_ci_high_s  # a real spread, not a single block
    assert len(timing.cpu_blocks_s) == timing.n_blocks and timing.cpu_median_s > 0
    assert timing.cpu_wall_ratio > 0 and timing.load_avg_1m >= 0
    assert interval_of(timing.__dict__, "call") is not None


def test_a_time_with_one_block_is_never_settled():
    one = timed_row("jacfwd", 1.0, 0.0, n=1)
    other = timed_row("jacrev", 5.0, 0.1)
    assert interval_of(one) is None
    verdict = compare_times(one, other)
    assert verdict.order == Order.UNKNOWN and "jacfwd" in verdict.text
    ((title, group),) = problems(frame(one, other))
    sentence = recommend(title, group).sentence()
    assert "no settled winner" in sentence and "use **" not in sentence
    assert "no confidence interval for jacfwd" in sentence


def test_non_overlapping_intervals_beat_and_overlapping_ones_tie_with_both_intervals():
    a, b = timed_row("jacfwd", 1.0, 0.05), timed_row("jacrev", 2.0, 0.05)
    assert compare_times(a, b).order == Order.FASTER
    assert compare_times(b, a).order == Order.SLOWER
    c = timed_row("jacrev", 1.02, 0.05)
    tie = compare_times(a, c)
    assert tie.order == Order.TIED
    assert tie.text.startswith("tied, the intervals overlap: jacfwd 1")
    assert " vs jacrev " in tie.text and tie.text.count("[") == 2 and "e+" not in tie.text


def test_seed003_names_the_faster_of_two_noisy_times_3_7x_apart():
    # seed003 printed "functional_vectorized is as fast" for 0.311 +- 0.027 ms against
    # 1.139 +- 0.406 ms: both noisy, yet 3.7x apart with intervals far from overlapping
    common = {"model": "seed003_cat_poly", "dtype": "float32", "within_tol": True, "rel_err": 0}
    rows = frame(
        timed_row("functional_vectorized", 0.311, 0.027, timing_warning=WARNING, **common),
        timed_row("grads_batched", 1.139, 0.406, timing_warning=WARNING, **common),
        timed_row("autograd_loop", 2.5, 0.1, **common),
    )
    text = seed003.answer(rows)
    assert "the fastest correct one here was functional_vectorized." in text
    assert "as fast" not in text and "not settled" not in text


def test_seed004_names_the_faster_strategy_and_quotes_no_ratio_from_a_tie():
    # seed004 printed "tied ... within the noise" for 1.14 ms against 2.55 ms
    common = {"model": "seed004_lm", "n_in": 84, "n_out": 576, "within_tol": True}
    rows = frame(
        timed_row("jacfwd_compiled", 1.14, 0.05, timing_warning=WARNING, **common),
        timed_row("jacfwd", 2.55, 0.6, timing_warning=WARNING, strategy_mode="forward", **common),
        timed_row("fd_forward_loop", 2.6, 0.6, strategy_kind="approximate", **common),
        timed_row("functional", 12.0, 0.5, strategy_mode="reverse", **common),
    )
    text = seed004.answer(rows)
    line = next(x for x in text.splitlines() if x.startswith("fastest exact"))
    assert line.startswith("fastest exact: jacfwd_compiled") and "not settled" not in line
    assert "functional takes 4.6" in text and "x fd_forward_loop (the thread" in text
    # jacfwd and the loop overlap: no ratio, and no verdict word in the number column (issue
    # 44): "-", with the legend under the table saying what it means
    table = next(x for x in text.splitlines() if x.startswith("jacfwd "))
    assert table.split()[-3] == "-"
    assert "- in a ratio column: the rule does not settle the order" in text


def test_auto_and_the_strategy_it_chose_disagreeing_are_reported_not_ranked():
    # a preset measured auto 3.2x faster than jacfwd_compiled, the strategy auto chose
    common = {"model": "seed004_lm", "n_in": 84, "n_out": 576, "within_tol": True}
    rows = frame(
        timed_row("auto", 1.07, 0.05, chosen_strategy="jacfwd_compiled", load_avg_1m=0.4, **common),
        timed_row("jacfwd_compiled", 3.46, 0.1, load_avg_1m=3.5, **common),
        timed_row("fd_forward_loop", 9.0, 0.1, strategy_kind="approximate", **common),
    )
    ((title, group),) = problems(rows)
    sentence = recommend(title, group).sentence()
    assert "the measurements disagree" in sentence and "use **" not in sentence
    assert "load average 0.40" in sentence and "load average 3.50" in sentence
    assert "the measurements disagree" in seed004.answer(rows)


def test_a_plain_sweep_names_a_winner_2x_apart_despite_a_large_iqr():
    # "jacrev (2.51 ms) and jacfwd are within the noise" for a 2.97 ms gap, 0.48 ms spread
    rows = frame(timed_row("jacrev", 2.51, 0.48), timed_row("jacfwd", 5.48, 0.48))
    ((title, group),) = problems(rows)
    assert recommend(title, group).sentence().startswith(f"{title}: use **jacrev**")


def test_a_runner_up_that_waited_for_its_core_is_ordered_by_cpu_time_with_wall_beside():
    """Issue 57: contention only adds time, so a contended runner-up's wall time may have
    lost to the machine; its CPU time stays its code's own, so the CPU intervals decide,
    and the verdict says so. Without CPU intervals (an older row) the order is unsettled."""

    def sentence(best_share: float, runner_share: float, device: str = "cpu", **runner) -> str:
        rows = frame(
            timed_row("jacrev", 1.0, 0.05, cpu_wall_ratio=best_share, device=device),
            timed_row("jacfwd", 2.0, 0.05, cpu_wall_ratio=runner_share, device=device, **runner),
        )
        ((title, group),) = problems(rows)
        return recommend(title, group).sentence()

    assert "use **jacrev**" in sentence(1.0, 1.0) and "CPU" not in sentence(1.0, 1.0)
    assert "use **jacrev**" in sentence(0.6, 1.0)
    busy = sentence(1.0, 0.6)
    assert "use **jacrev** (" in busy and " CPU, " in busy and " wall)" in busy
    assert "x slower by CPU time: the machine was busy" in busy
    tied = sentence(1.0, 0.6, cpu_ms=1.0)  # the runner-up's CPU time: the winner's own
    assert "no settled winner between jacrev and jacfwd" in tied and "use **" not in tied
    assert "by CPU time: the machine was busy; wall time " in tied
    no_cpu = {f"{basis}_{k}": None for basis in ("cpu", "thread_cpu") for k in ("median_s",)}
    older = sentence(1.0, 0.6, **no_cpu)
    assert "no settled winner between jacrev and jacfwd" in older and "use **" not in older
    assert "jacfwd waited for its core while timed (CPU/wall per thread 0.60" in older
    assert "jacrev is faster" in older  # the rule's verdict is still shown, with both times
    assert contention({"cpu_wall_ratio": 1.2, "threads": 2, "device": "cpu"}) == 0.6
    assert contention({"cpu_wall_ratio": 0.6, "threads": 1, "device": "cuda:0"}) is None
    assert "use **jacrev**" in sentence(1.0, 0.6, device="cuda:0")  # it waits for the GPU


def test_the_parent_headline_quotes_no_ratio_against_an_unsettled_default():
    settled = frame(timed_row("jacrev", 1.0, 0.05), timed_row("functional", 8.0, 0.1))
    assert overview(settled).description.startswith("**Recommended: jacrev** (8")
    one_block = frame(timed_row("jacrev", 1.0, 0.05), timed_row("functional", 8.0, 0.1, n=1))
    view = overview(one_block)
    first = view.description.splitlines()[0]
    assert first == "**Recommended: jacrev or functional (not settled)**"
    assert "speedup_vs_functional" not in view.tags and "faster" not in first
    assert "no confidence interval for functional" in view.description


def test_tables_show_the_interval_and_mark_noisy_times(tmp_path):
    rows = frame(
        timed_row("jacfwd", 1.0, 0.05, timing_warning=WARNING), timed_row("jacrev", 2.0, 0.05)
    )
    ((title, group),) = problems(rows)
    lines = {line[0]: line for line in problem_lines(group)}
    assert lines["jacfwd"][4].endswith(NOISY) and "[" in lines["jacfwd"][4]
    assert lines["jacrev"][5] == "n/a"  # functional (the baseline) was not measured
    summary = summary_table(group.assign(job_num=[0, 1], resumed=False), [])
    assert summary.caption and NOISY in summary.caption
    md = write_report(group, tmp_path)[0]
    assert "use **jacfwd**" in md.read_text()


def test_compare_of_the_same_code_under_load_flags_nothing_and_a_real_change_is_flagged():
    before = frame(timed_row("jacrev", 1.0, 0.02), timed_row("jacfwd", 2.0, 0.04))
    # wall time 1.6x under a competing load, CPU time unchanged: not a change of the code
    loaded = frame(
        timed_row("jacrev", 1.6, 0.3, cpu_ms=1.0, job_id="a" * 16),
        timed_row("jacfwd", 3.1, 0.5, cpu_ms=2.0, job_id="b" * 16),
    )
    pairs, _ = compare(before, loaded)
    assert set(pairs["flag"]) == {"same"} and set(pairs["basis"]) == {"cpu"}
    slower = frame(
        timed_row("jacrev", 2.0, 0.02, job_id="c" * 16),
        timed_row("jacfwd", 2.0, 0.04, job_id="d" * 16),
    )
    pairs, _ = compare(before, slower)
    flags = dict(zip(pairs["strategy_after"], pairs["flag"], strict=True))
    assert flags == {"jacrev": "slower", "jacfwd": "same"}


def test_compare_never_flags_a_row_without_an_interval():
    before = frame(timed_row("jacrev", 1.0, 0.0, n=1))
    after = frame(timed_row("jacrev", 30.0, 0.0, n=1, job_id="e" * 16))
    pairs, _ = compare(before, after)
    assert list(pairs["flag"]) == ["unknown (no interval)"]


@pytest.mark.parametrize("n", [1, MIN_BLOCKS - 1])
def test_fewer_blocks_than_the_minimum_give_no_interval(n):
    assert interval_of(timed_row("jacrev", 1.0, 0.1, n=n)) is None


def test_an_answer_marks_rows_reused_from_an_earlier_command():
    from jacbench.run.sweep.answer import reused_note

    rows = frame(
        timed_row("jacrev", 1.0, 0.05, dtype="float32"),
        timed_row("jacfwd", 2.0, 0.05, dtype="float32"),
    )
    note = reused_note(rows.assign(resumed=[True, False]))
    assert "Reused 1 row(s) measured by earlier commands (2026-01-02 03:04 UTC" in note
    assert "force=true" in note
    many = pd.concat([rows] * 19, ignore_index=True).assign(resumed=True)
    many.loc[many.index[-1], "started_at"] += pd.Timedelta(minutes=12)
    # issue 44: a rerun printed a 38-entry paragraph; one line says it all
    line = reused_note(many).strip()
    assert "\n" not in line and line.startswith("Reused 38 row(s)")
    assert "(2026-01-02 03:04 to 2026-01-02 03:16 UTC" in line
    assert reused_note(rows.assign(resumed=False)) == ""


def test_side_by_side_interleaves_and_keeps_every_block():
    from jacbench.timing.measure import side_by_side

    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    timings = side_by_side(calls, rounds=MIN_BLOCKS, block_s=0.0)
    assert {t.n_blocks for t in timings.values()} == {MIN_BLOCKS}
    blocks = order[3:]  # after one calibration call each, one call per block (block_s 0)
    assert blocks[:3] == ["a", "b", "c"] and blocks[3:6] == ["b", "c", "a"]  # rotated
    assert all(interval_of(t.__dict__, n) is not None for n, t in timings.items())


def test_an_approximate_pick_over_a_contended_exact_one_is_not_settled():
    """Issue 42: "9.13x slower ... settled so" was printed for an approximate-vs-exact choice
    whose losing exact strategy had CPU/wall 0.32-0.54: the exact-first choice asks the whole
    rule (intervals and the loser's contention), as every other verdict does."""
    common = {"within_tol": True}
    rows = frame(
        timed_row("fd_forward", 1.0, 0.02, strategy_kind="approximate", **common),
        # busy: its wall time 9.13x, but its CPU time the approximate one's own
        timed_row("jacrev", 9.13, 0.1, cpu_wall_ratio=0.4, cpu_ms=1.0, **common),
    )
    ((title, group),) = problems(rows)
    rec = recommend(title, group)
    assert rec.best == "jacrev" and rec.alternative is not None
    assert rec.alternative.faster is None  # no ratio quoted from an unsettled pair
    text = rec.sentence()
    assert "settled" not in text.replace("not settled", "")
    assert "tied, the intervals overlap" in text and "by CPU time: the machine was busy" in text


def test_a_figure_stars_only_a_settled_winner(tmp_path, monkeypatch):
    """Issue 42: the time figure of every seed004_small child run starred "auto (pick)"
    while the parent said there was no settled winner."""
    from jacbench.report import job_figures, plots

    picks: list[dict] = []
    real = plots.time_per_strategy

    def recording(problems_, picks_=None):
        picks.append(dict(picks_ or {}))
        return real(problems_, picks_)

    monkeypatch.setattr(plots, "time_per_strategy", recording)
    tied = frame(timed_row("auto", 1.0, 0.2), timed_row("jacfwd_folded", 1.05, 0.2))
    job_figures.time_figures(tied, tmp_path)
    settled = frame(timed_row("auto", 1.0, 0.02), timed_row("jacfwd_folded", 2.0, 0.02))
    job_figures.time_figures(settled, tmp_path)
    assert [set(p.values()) for p in picks] == [{""}, {"auto"}]


def test_a_sweep_of_many_problems_draws_no_figure_per_job(tmp_path):
    """The map (150 problems, 1950 job runs): a figure on every job run cost ~10 minutes at
    the sweep's end; above MOST_PROBLEMS the report's figures serve instead."""
    from jacbench.report import job_figures

    rows = frame(
        *(
            timed_row(name, ms, 0.02, model=model, job_id=f"{model}-{name}")
            for model in ("a", "b")
            for name, ms in (("jacrev", 1.0), ("jacfwd", 2.0))
        )
    )
    assert len(set(job_figures.time_figures(rows, tmp_path / "two").values())) == 2
    assert job_figures.time_figures(rows, tmp_path / "one", most=1) == {}


def test_the_same_code_timed_apart_is_said_to_disagree_without_blaming_a_load_change():
    """Issue 42: an answer blamed "load changed" while quoting CPU/wall 0.60 vs 0.63."""
    rows = frame(
        timed_row("auto", 1.0, 0.02, chosen_strategy="jacfwd", cpu_wall_ratio=0.9),
        timed_row("jacfwd", 2.0, 0.02, cpu_wall_ratio=0.93),
    )
    ((title, group),) = problems(rows)
    text = recommend(title, group).sentence()
    assert "the measurements disagree" in text and "load changed" not in text
    assert "CPU/wall 0.90" in text and "CPU/wall 0.93" in text
