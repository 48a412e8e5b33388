"""A sweep over two numeric axes read as a map (issue 47): the settled winner per cell, best
forward over best reverse, auto's regret, where the textbook rule loses, and the heat maps
drawn so that every cell's text stays in its cell."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from helpers.results import make_result
from jacbench.report import grid, heatmaps
from jacbench.report.build import write_report
from jacbench.report.plots import drawn_texts
from jacbench.report.problems import normalise

MODES = {"jacfwd": "forward", "jacrev": "reverse", "auto": "auto", "fd_forward": "numeric"}
# (N, M) -> ms per strategy; intervals are +-2% (make_result)
TIMES = {
    (4, 64): {"jacfwd": 1.0, "jacrev": 3.0, "auto": 1.0, "fd_forward": 0.9},  # forward, textbook
    (64, 4): {"jacfwd": 1.0, "jacrev": 5.0, "auto": 1.0, "fd_forward": 3.0},  # forward, M < N
    (4, 4): {"jacfwd": 1.0, "jacrev": 1.01, "auto": 1.0, "fd_forward": 2.0},  # tied modes
    (64, 64): {"jacfwd": 2.0, "jacrev": 1.0, "auto": 1.5, "fd_forward": 3.0},  # reverse at M=N
}


def map_rows(models=("map_dense", "map_banded")) -> pd.DataFrame:
    results = []
    for model in models:
        for (n, m), times in TIMES.items():
            for strategy, ms in times.items():
                approximate = strategy == "fd_forward"
                results.append(
                    make_result(
                        model=model,
                        strategy=strategy,
                        strategy_kind="approximate" if approximate else "exact",
                        strategy_mode=MODES[strategy],
                        chosen_strategy="jacfwd" if strategy == "auto" else "",
                        n_in=n,
                        n_out=m,
                        time_median_s=ms * 1e-3,
                        err_eps=1e5 if approximate else 1.0,
                        tolerance=0.1 if approximate else 1.2e-5,
                        model_options=json.dumps({"n_in": n, "n_out": m, "hidden": 64}),
                        config_hash=f"{model}{n}{m}{strategy}",
                        job_id=hashlib.md5(f"{model}{n}{m}{strategy}".encode()).hexdigest()[:16],
                        jacobian=None,
                    )
                )
    return normalise(pd.DataFrame([r.__dict__ for r in results]))[0]


@pytest.fixture(scope="module")
def found():
    return grid.cells(map_rows())


def cell(cells, model: str, n: int, m: int) -> grid.Cell:
    (c,) = [c for c in cells if c.family.startswith(model) and (c.x, c.y) == (n, m)]
    return c


def test_the_axes_are_n_and_m_and_each_family_has_its_cells(found):
    axes, cells = found
    assert axes == ("n_in", "n_out")
    assert {c.family for c in cells} == {"map_dense float32 cpu", "map_banded float32 cpu"}
    assert len(cells) == 8


def test_a_cell_has_a_winner_only_where_the_rule_settles_it(found):
    _, cells = found
    assert cell(cells, "map_dense", 64, 4).winner == "jacfwd"
    assert cell(cells, "map_dense", 64, 64).winner == "jacrev"
    tied = cell(cells, "map_dense", 4, 4)  # jacfwd 1.0 ms vs jacrev 1.01: intervals overlap
    assert tied.winner == "" and set(tied.tied) == {"jacfwd", "jacrev"}
    # fd_forward (approximate) at 0.9 ms is not 1.5x faster than jacfwd: exact first
    assert cell(cells, "map_dense", 4, 64).winner == "jacfwd"


def test_forward_over_reverse_and_auto_regret(found):
    _, cells = found
    c = cell(cells, "map_dense", 64, 4)
    assert c.forward_over_reverse == pytest.approx(0.2) and c.modes_settled
    assert not cell(cells, "map_dense", 4, 4).modes_settled
    loss = cell(cells, "map_dense", 64, 64)
    assert loss.regret == pytest.approx(1.5) and loss.auto_loses and loss.best_exact == "jacrev"
    assert cell(cells, "map_dense", 4, 64).regret == pytest.approx(1.0)


def test_the_summary_names_the_worst_cell_and_where_the_textbook_rule_loses(found):
    summary = grid.summarise(*found)
    assert summary.settled_cells == 6  # 8 cells, the two ties have no settled winner
    assert summary.worst is not None and (summary.worst.x, summary.worst.y) == (64, 64)
    where = {(c.family.split()[0], c.x, c.y) for c in summary.textbook_losses}
    # forward wins at M < N (64, 4); reverse wins at M = N (64, 64); the ties do not count
    assert where == {(m, x, y) for m in ("map_dense", "map_banded") for x, y in ((64, 4), (64, 64))}
    text = "\n".join(summary.lines())
    assert "worst 1.50 (map_" in text and "N=64, M=64, against jacrev" in text
    assert "2 cell(s) where auto is settled slower by more than 1.10x" in text
    assert "picks the slower mode in 4 cell(s)" in text


def test_the_summary_lists_every_cell_the_regret_map_frames_also_without_a_settled_winner():
    """The map of 2026-11-26 framed banded float64 N = M = 1024 (auto 3.41x, settled slower
    than the best) while the summary, counting cells with a settled winner, did not name it."""
    rows = map_rows(models=("map_dense",))
    slow = (rows["strategy"] == "auto") & (rows["n_in"] == 4) & (rows["n_out"] == 4)
    rows.loc[slow, ["time_median_s", "time_ci_low_s", "time_ci_high_s"]] = [
        1.5e-3,
        1.47e-3,
        1.53e-3,
    ]
    axes, cells = grid.cells(rows)
    tie = cell(cells, "map_dense", 4, 4)
    assert not tie.winner and tie.auto_loses  # jacfwd and jacrev tied; auto settled slower
    framed = {(c.x, c.y) for c in cells if c.auto_loses}
    summary = grid.summarise(axes, cells)
    assert {(c.x, c.y) for c in summary.losses} == framed == {(4, 4), (64, 64)}
    text = "\n".join(summary.lines())
    assert "2 cell(s) where auto is settled slower by more than 1.10x" in text
    assert "N=4 M=4 (1.50, no settled winner, auto ran jacfwd itself" in text
    assert "N=64 M=64 (1.50)" in text
    assert summary.settled_cells == 3  # the regret's median and worst: settled cells only


def test_a_loss_where_auto_ran_the_winner_itself_says_so_and_keeps_its_number():
    """The map of 2026-11-26 lost one cell (conv float64 N = M = 256, 1.32) where auto had
    chosen the winner, jacrev: its job and jacrev's own measured one code at two moments
    (side by side in one process auto / best was 0.90)."""
    rows = map_rows(models=("map_dense",))
    auto = rows["strategy"] == "auto"
    rows.loc[auto & (rows["n_in"] == 64) & (rows["n_out"] == 64), "chosen_strategy"] = "jacrev"
    summary = grid.summarise(*grid.cells(rows))
    text = "\n".join(summary.lines())
    assert "N=64 M=64 (1.50, auto ran jacrev itself: two jobs of one code)" in text
    assert len(summary.losses) == 1  # still a loss: the number stands, the reader is told why
    rows.loc[auto, "chosen_strategy"] = "jacfwd"  # auto chose another: a plain loss
    assert "N=64 M=64 (1.50)" in "\n".join(grid.summarise(*grid.cells(rows)).lines())


def test_a_cell_where_auto_waited_for_its_core_is_left_out_of_the_regret_and_said():
    """auto 1.5x slower at (64, 64), but its process got half a core while timed, and its row
    has no CPU time (an earlier jacbench): that wall time is the machine's, not auto's, so it
    is neither a loss nor in the median; the summary counts it apart. With its CPU time
    (issue 57), the CPU time decides: 1.5x there too, a loss."""
    rows = map_rows(models=("map_dense",))
    waited = (rows["strategy"] == "auto") & (rows["n_in"] == 64) & (rows["n_out"] == 64)
    rows.loc[waited, "cpu_wall_ratio"] = 0.5
    by_cpu = grid.summarise(*grid.cells(rows))
    assert by_cpu.contended == [] and [(c.x, c.y) for c in by_cpu.losses] == [(64, 64)]
    for basis in ("cpu", "thread_cpu"):
        rows.loc[waited, f"{basis}_median_s"] = float("nan")
    summary = grid.summarise(*grid.cells(rows))
    (left_out,) = summary.contended
    assert (left_out.x, left_out.y) == (64, 64) and not left_out.auto_loses
    assert summary.settled_cells == 2 and summary.losses == [] and max(summary.regrets) == 1.0
    text = "\n".join(summary.lines())
    assert "float32 median 1.00 over 2" in text
    assert "1 more cell(s) with a settled winner left out: auto was slower there but waited" in text


def test_rows_without_two_numeric_axes_have_no_map():
    rows = map_rows(models=("map_dense",))
    one_axis = rows[rows["n_out"] == 4]
    assert grid.cells(one_axis) == (None, [])


@pytest.mark.parametrize("name", ["map_winner", "map_forward_over_reverse", "map_auto_regret"])
def test_every_cell_text_stays_in_its_cell_and_no_text_is_cut(found, name):
    fig = heatmaps.heat_maps(*found)[name]
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    texts = drawn_texts(fig)
    for text in texts:
        box = text.get_window_extent(renderer)
        assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1, text.get_text()
        assert page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, text.get_text()
    for ax in fig.axes:
        if not ax.get_xticks().size or ax.get_label() == "<colorbar>":
            continue
        columns = len(ax.get_xticks())
        width = ax.bbox.width / columns
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            assert box.width < width, (text.get_text(), box.width, width)
    boxes = [t.get_window_extent(renderer) for t in texts]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b) or a == b, "two texts overlap"


def test_a_tie_is_labelled_with_both_strategies(found):
    fig = heatmaps.heat_maps(*found)["map_winner"]
    labels = {t.get_text().split("\n")[0] for ax in fig.axes for t in ax.texts}
    assert "JF/JR" in labels or "JR/JF" in labels
    assert "JF" in labels and "JR" in labels


@pytest.mark.slow  # ~8 s: a whole report with its figures
def test_the_report_has_the_map_section_and_its_images(tmp_path):
    written = write_report(map_rows(), tmp_path)
    names = {p.name for p in written}
    assert {"map_winner.png", "map_forward_over_reverse.png", "map_auto_regret.png"} <= names
    text = (tmp_path / "report.md").read_text()
    assert "### The map" in text and "auto / best exact over 6 cells" in text


def test_the_map_answer_draws_each_familys_winners_and_says_where_auto_and_the_rule_lose():
    from jacbench.experiments.strategy_map import answer

    text = answer(map_rows())
    assert text.startswith("map: the fastest Jacobian strategy per cell of inputs N x outputs M")
    dense = text.split(
        "map_dense float32 cpu: the settled winner, or the two leaders (why none settled)\n", 1
    )[1]
    top, bottom = dense.splitlines()[1:3]  # M=64 first (largest M on top), then M=4
    assert top.split() == ["M=64", "JF", "JR"]
    assert bottom.split() == ["M=4", "JF/JR", "(tied)", "JF"]  # unsettled, with its reason
    assert "codes: JF = jacfwd, JR = jacrev" in text
    assert "picks the slower mode in 4 cell(s)" in text


@pytest.mark.parametrize("n, m", [(256, 4), (1024, 16)])
def test_auto_calibrates_the_folded_forward_mode_on_a_wide_banded_jacobian(n, m):
    """The pass-count pruning (a candidate needing 8x the other mode's passes cannot win)
    does not hold for the folded forward mode: on the map's banded family at N=256, M=4 it
    was 1.5-1.9x faster than the reverse candidate auto kept (scripts/auto_regret.py). It
    stays a candidate; jacfwd (vmap over N tangents) is still left out."""
    import torch

    from jacbench.core.problem import make_problem
    from jacbench.models.map import Banded
    from jacbench.strategies.auto import candidates

    problem = make_problem("map_banded", Banded(n_in=n, n_out=m), torch.randn(n), "input", False)
    names = [name for name, _ in candidates(problem, compile=False)]
    assert "jacfwd_folded" in names and "jacfwd" not in names, names


def test_auto_times_a_near_tie_again_and_keeps_the_faster_of_the_second_timing():
    """Issue 47: five rounds of one ~10 ms call each picked jacrev on the map's dense N = M =
    1024 cell where jacfwd_folded was 1.11-1.18x faster in every round of a longer timing;
    five rounds of ~40 calls of 0.25 ms picked functional on conv float64 N=256 M=4 where
    grads_batched was 1.14x faster. A near tie is timed again, fast calls too."""
    from jacbench.strategies.auto import CLOSE, fastest

    asked: list[list[int]] = []

    def again(close: list[int]) -> list[float]:
        asked.append(close)
        return [3.0, 2.0, 2.5][: len(close)]

    assert fastest([1.0, 0.95 * CLOSE, 0.99 * CLOSE, 4.0], again) == 1  # 0, 1, 2 close
    assert asked == [[0, 1, 2]]
    assert fastest([1.0, 1.01 * CLOSE, 3.0], again) == 0  # nobody close: timed once
    assert fastest([2.0], again) == 0
    assert asked == [[0, 1, 2]]
    tiny = [0.26e-3, 0.23e-3, 0.5e-3]  # fast calls, close: timed again as well
    assert fastest(tiny, again) == 1 and asked[-1] == [0, 1]


def test_the_map_answer_counts_failed_jobs_and_answers_nothing_when_every_job_failed():
    """The first GPU run failed every job (a device mismatch) and its answer still pointed at
    the heat maps as if they held one."""
    from jacbench.experiments.strategy_map import answer

    rows = map_rows()
    broken = rows.index[:3]
    rows.loc[broken, "status"] = "failed"
    rows.loc[broken, "error_message"] = "RuntimeError: mat is on cpu"
    text = answer(rows)
    assert f"- 3 of {len(rows)} jobs failed, their cells left empty" in text
    assert "(most often: RuntimeError: mat is on cpu)" in text and "see the heat maps" in text
    rows["status"] = "failed"
    text = answer(rows)
    assert text.startswith(f"map: nothing to answer: {len(rows)} of {len(rows)} jobs failed")
    assert "see the heat maps" not in text


# ---- auto's losses timed again, side by side ---------------------------------------------


def map_configs(rows: pd.DataFrame) -> list:
    """Each row's job config, by its position (``job_num``), as the sweep composed them."""
    from helpers.cli import compose_job

    return [
        compose_job(
            f"model={r.model}",
            f"model.n_in={r.n_in}",
            f"model.n_out={r.n_out}",
            f"strategy={r.strategy}",
        )
        for r in rows.itertuples()
    ]


def test_the_map_times_auto_and_the_best_exact_again_where_auto_loses_and_reads_that_timing():
    """The map of 2026-11-26 kept one loss measured across two jobs (conv float64 N = M = 256:
    auto / jacrev 1.32 across jobs, 0.90 timed side by side in one process). Its sweep now
    times auto and the best exact strategy again, in one job, wherever auto loses, and the
    map reads that newer timing."""
    from jacbench.run.pair import SecondRound
    from jacbench.run.sweep.retiming import pairs_of

    rows = map_rows(models=("map_dense",)).reset_index(drop=True)
    rows["job_num"] = range(len(rows))
    configs = map_configs(rows)
    (pair,) = pairs_of(SecondRound.AUTO_LOSSES, rows, configs)  # only (64, 64) loses
    auto = rows[(rows["strategy"] == "auto") & (rows["n_in"] == 64) & (rows["n_out"] == 64)]
    best = rows[(rows["strategy"] == "jacrev") & (rows["n_in"] == 64) & (rows["n_out"] == 64)]
    assert pair.labels == ("auto", "jacrev")
    assert pair.jobs == (int(auto["job_num"].iloc[0]), int(best["job_num"].iloc[0]))
    assert [c["model"]["n_in"] for c in pair.configs] == [64, 64]
    assert [c["strategy"]["name"] for c in pair.configs] == ["auto", "jacrev"]
    assert pairs_of(SecondRound.NONE, rows, configs) == []
    best_two = pairs_of(SecondRound.BEST_TWO, rows, configs)  # a preset's: every problem's two
    assert len(best_two) == 4 and pair not in best_two

    later = pd.Timestamp(rows["started_at"].max()) + pd.Timedelta(seconds=1)
    retimed = pd.concat([auto, best]).assign(
        round="side_by_side",
        pair_id="p",
        started_at=later,
        time_median_s=1.0e-3,
        time_ci_low_s=0.98e-3,
        time_ci_high_s=1.02e-3,
    )
    after = pd.concat([rows, retimed], ignore_index=True)
    _, cells = grid.cells(after)
    assert not cell(cells, "map_dense", 64, 64).auto_loses
    assert cell(cells, "map_dense", 64, 64).regret == 1.0
    assert pairs_of(SecondRound.AUTO_LOSSES, after, map_configs(after)) == []
    # over the bound but not settled slower (intervals overlap): timed again as well
    unsure = (rows["strategy"] == "auto") & (rows["n_in"] == 4) & (rows["n_out"] == 4)
    rows.loc[unsure, ["time_median_s", "time_ci_low_s", "time_ci_high_s"]] = [
        1.2e-3,
        0.9e-3,
        1.5e-3,
    ]
    cells = {(c.x, c.y): c for c in grid.cells(rows)[1]}
    assert cells[(4, 4)].regret == pytest.approx(1.2) and not cells[(4, 4)].auto_loses
    found = {p.jobs for p in pairs_of(SecondRound.AUTO_LOSSES, rows, configs)}
    assert len(found) == 2 and pair.jobs in found


@pytest.mark.parametrize(
    ("given", "kind"),
    [
        ("best_two", "best_two"),
        ("auto_losses", "auto_losses"),
        ("none", "none"),
        (True, "best_two"),
        (False, "none"),
        ("False", "none"),
    ],
)
def test_side_by_side_names_its_round_and_keeps_the_earlier_true_and_false(given, kind):
    from jacbench.run.pair import second_round

    assert second_round(given).value == kind


def test_an_unknown_second_round_is_refused_with_the_choices():
    from jacbench.core.errors import ConfigError
    from jacbench.run.inputs import check_side_by_side

    with pytest.raises(ConfigError) as refused:
        check_side_by_side("sometimes")
    assert str(refused.value) == (
        "side_by_side=sometimes: valid: best_two, auto_losses, none "
        "(true and false: best_two and none)"
    )


@pytest.mark.slow  # a three-job CLI sweep
def test_a_sweep_times_auto_again_beside_the_strategy_it_lost_to(cli, tmp_path):
    """auto held to its rule (no calibration) runs jacrev on a banded 64 x 16 function where
    the folded forward mode is ~3x faster: a settled loss, so the sweep adds one job that
    times the two again, interleaved, and records a row for each."""
    own = tmp_path / "conf" / "strategy"
    own.mkdir(parents=True)
    (own / "auto_rule.yaml").write_text(
        "defaults:\n  - auto\ncompile: false\ncalibrate: false\ncache: false\n"
    )
    proc = cli(
        "-m",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "model=map_banded",
        "model.n_in=64",
        "model.n_out=16",
        "strategy=auto_rule,jacfwd_folded_eager",
        "side_by_side=auto_losses",
        "timing=quick",
        "timing.memory=false",
        "mlflow.enabled=false",
        "report=false",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Timing auto and the best exact of 1 problem(s) again, side by side: job(s) 2-2" in (
        proc.stdout
    )
    rows = pd.concat(pd.read_parquet(f) for f in (tmp_path / "results").glob("*.parquet"))
    retimed = rows[rows["round"] == "side_by_side"]
    assert sorted(retimed["strategy"]) == ["auto", "jacfwd_folded"]
    assert retimed["pair_id"].nunique() == 1 and (retimed["status"] == "ok").all()
    assert (rows["round"] == "first").sum() == 2


def test_auto_against_the_best_reads_the_pairs_own_timing_at_a_slower_moment():
    """Measured: map_dense float32 N=1024 M=16 at the end of the map of 2026-11-26: first
    round grads_batched 0.220 ms, functional_vectorized 0.228, auto 0.274; auto and
    grads_batched re-timed side by side 0.284 and 0.282 (a slower moment). Read against
    functional_vectorized's first-round time auto lost by 1.24; side by side it is 1.01."""
    rows = map_rows(models=("map_dense",))
    at = (rows["n_in"] == 64) & (rows["n_out"] == 64)
    first = rows[at].copy()
    first.loc[first["strategy"] == "jacfwd", "time_median_s"] = 1.04e-3  # a close third
    later = pd.Timestamp(first["started_at"].max()) + pd.Timedelta(seconds=5)
    again = first[first["strategy"].isin(["auto", "jacrev"])].assign(
        round="side_by_side", pair_id="p", started_at=later
    )
    again["time_median_s"] = again["strategy"].map({"auto": 1.29e-3, "jacrev": 1.28e-3})
    for name in ("time_ci_low_s", "time_ci_high_s"):
        again[name] = again["time_median_s"] * (0.98 if "low" in name else 1.02)
    cell_rows = pd.concat([first, again], ignore_index=True)
    against = grid.auto_against_best(cell_rows)
    assert str(against.best["strategy"]) == "jacrev"
    assert against.regret == pytest.approx(1.29 / 1.28) and not against.loses


def _texts(fig) -> list[str]:
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return [t.get_text() for t in drawn_texts(fig)]


def _hatched(fig) -> int:
    return sum(1 for ax in fig.axes for p in ax.patches if p.get_hatch())


def test_every_unsettled_cell_is_drawn_hatched_with_its_reason_and_no_ratio(found):
    """Issue 57: the map drew unsettled ratios in the colours of settled ones. (4, 4) has its
    modes tied (jacfwd 1.0 ms vs jacrev 1.01): no ratio there, the reason in its place."""
    axes, cells = found
    tied = cell(cells, "map_dense", 4, 4)
    assert tied.modes_why == "tied" and tied.winner_why == "tied"
    figures = heatmaps.heat_maps(axes, cells)
    ratio_texts = _texts(figures["map_forward_over_reverse"])
    assert f"{tied.forward_over_reverse:.2g}" not in ratio_texts  # 0.99: not shown
    assert ratio_texts.count("tied") == 2  # one per family
    assert _hatched(figures["map_forward_over_reverse"]) == 2
    winner_texts = _texts(figures["map_winner"])
    assert sum(text.endswith("\ntied") for text in winner_texts) == 2
    assert _hatched(figures["map_winner"]) == 2


def test_the_regret_map_shows_no_unsettled_value_below_the_bound_and_marks_a_settled_one():
    """Issue 57: auto drawn five times faster than the best it chooses among (0.13-0.33),
    unframed, as a result. Unsettled: greyed with the reason; settled: an artefact."""
    rows = map_rows(models=("map_dense",))
    at = (rows["n_in"] == 4) & (rows["n_out"] == 64)
    auto = rows["strategy"] == "auto"
    wide = ["time_median_s", "time_ci_low_s", "time_ci_high_s"]
    rows.loc[auto & at, wide] = [0.2e-3, 0.1e-3, 1.2e-3]  # best jacfwd 1.0 ms: overlapping
    rows.loc[auto & at, [c.replace("time", "cpu") for c in wide]] = [0.2e-3, 0.1e-3, 1.2e-3]
    axes, cells = grid.cells(rows)
    fast = cell(cells, "map_dense", 4, 64)
    assert fast.regret == pytest.approx(0.2) and fast.regret_why == "tied"
    texts = _texts(heatmaps.regret(axes, cells))
    assert "0.20" not in " ".join(texts) and "tied" in texts
    rows.loc[auto & at, wide] = [0.2e-3, 0.19e-3, 0.21e-3]  # now settled faster
    axes, cells = grid.cells(rows)
    assert cell(cells, "map_dense", 4, 64).regret_artefact
    texts = _texts(heatmaps.regret(axes, cells))
    assert f"0.20 {heatmaps.ARTEFACT}" in texts
    assert any("measurement artefact" in text for text in texts)  # the legend says what it is


def test_a_regret_auto_cannot_reach_is_left_out_of_the_median_and_called_an_artefact():
    """Issue 57: auto 'five times faster' than the best strategy it chooses among is a
    measurement artefact, not a regret of 0.2 to take a median over."""
    rows = map_rows(models=("map_dense",))
    at = (rows["strategy"] == "auto") & (rows["n_in"] == 4) & (rows["n_out"] == 64)
    rows.loc[at, ["time_median_s", "time_ci_low_s", "time_ci_high_s"]] = [0.2e-3, 0.19e-3, 0.21e-3]
    summary = grid.summarise(*grid.cells(rows))
    assert [(c.x, c.y) for c in summary.artefacts] == [(4, 64)]
    assert min(summary.regrets) >= 1 / grid.REGRET_BOUND and summary.settled_cells == 2
    text = "\n".join(summary.lines())
    assert "1 cell(s) with a settled winner left out where auto measured under 0.91x" in text
    assert "map_dense float32 cpu N=4 M=64 0.20" in text and "measurement artefact" in text
