"""The report and console output where a new user found them wrong (issue 10): failures
before setup listed, exact strategies preferred unless an approximate one is clearly faster,
named plot points, and a failed run's table without placeholders."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from matplotlib.text import Text
from rich.console import Console

from helpers.point_names import crossings, drawn, misreadings
from helpers.results import make_result
from jacbench.report.build import write_report
from jacbench.report.display import result_table
from jacbench.report.problems import normalise, problems

NO_CUDA = "device=cuda requested but CUDA is not available on this machine; use device=cpu"


def frame(*results) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in results])


def before_setup(strategy: str, message: str, **changes):
    """A job that failed before its problem was built: no shape, kind or mode recorded."""
    return make_result(
        strategy=strategy,
        status="failed",
        error_message=message,
        strategy_kind="",
        strategy_mode="",
        wrt="",
        n_in=None,
        n_out=None,
        time_median_s=None,
        time_iqr_s=None,
        n_timed=None,
        first_call_s=None,
        rel_err=None,
        err_eps=None,
        max_abs_err=None,
        within_tol=None,
        peak_mem_bytes=None,
        memory_method="",
        reference_method="",
        reference_uncertainty=None,
        device_name="",
        job_id=f"{strategy}:{len(message)}",  # one job per strategy and message
        **changes,
    )


def test_jobs_that_failed_before_setup_are_in_the_report(tmp_path):
    rows = frame(
        make_result(strategy="jacrev"),
        before_setup("jacrev", NO_CUDA, device="cuda"),
        before_setup("functional", NO_CUDA, device="cuda"),
        before_setup("jacfwd", "cannot build model 'broken': no such file", model="broken"),
    )
    titles = [title for title, _ in problems(normalise(rows)[0])]
    assert "mlp float32 cuda (failed before setup: shape unknown)" in titles
    assert "broken float32 cpu (failed before setup: shape unknown)" in titles
    assert "mlp (N=3, M=2) float32 cpu" in titles  # no model options from failed rows
    write_report(rows, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert report.count(NO_CUDA) == 2  # jacrev and functional, each once
    assert "| jacfwd | failed | cannot build model 'broken': no such file |" in report
    assert "mlp float32 cuda (failed before setup: shape unknown): no strategy finished" in report


def rendered(table) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def test_failed_run_table_shows_only_what_is_known_and_the_reason_once():
    text = rendered(result_table(before_setup("jacrev", NO_CUDA, device="cuda")))
    for placeholder in ("wrt ?", "M=-", "(, )", "- s", "()", "IQR -"):
        assert placeholder not in text, text
    assert text.count(NO_CUDA) == 1
    assert "config_hash" in text and "median time" not in text
    assert NO_CUDA not in rendered(result_table(before_setup("jacrev", NO_CUDA), False))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_failed_single_run_prints_its_reason_once(launch):
    code, lines, printed = launch("strategy=jacrev", "device=cuda")
    assert code == 1 and len(lines) == 1 and lines[0].startswith("jacbench: failed: ")
    reason = lines[0].removeprefix("jacbench: failed: ")
    assert printed.count(reason) == 1, printed
    assert "wrt ?" not in printed and "M=-" not in printed and "(, )" not in printed


def timed(strategy: str, ms: float, kind: str = "exact", noisy: bool = False, **changes):
    fields = {
        "strategy_mode": "numeric" if kind == "approximate" else "reverse",
        "time_iqr_s": ms * 1e-5,
        "timing_warning": "Interquartile range is 40% of the median" if noisy else "",
        "err_eps": 1e3 if kind == "approximate" else 2.0,
        "job_id": f"{strategy}{ms}".ljust(16, "0")[:16],
        **changes,
    }
    return make_result(strategy=strategy, strategy_kind=kind, time_median_s=ms * 1e-3, **fields)


def recommendation(*results):
    from jacbench.report.analysis import recommend

    ((title, group),) = problems(normalise(frame(*results))[0])
    return recommend(title, group)


def test_exact_is_recommended_unless_an_approximate_one_is_clearly_faster():
    near = recommendation(timed("fd_central", 1.0, "approximate"), timed("jacrev", 1.4))
    assert near.best == "jacrev" and near.alternative.name == "fd_central"
    assert near.alternative.faster == pytest.approx(1.4)
    text = near.sentence()
    assert "use **jacrev** (1.4 ms)" in text
    assert "Approximate alternative: fd_central (1 ms, err_eps 1e+03), 1.4x faster" in text
    assert near.choice() == "jacrev (fd_central is 1.4x faster but approximate)"

    # 3x faster but without an interval (one timed block): the rule cannot say, exact is kept
    one_block = recommendation(
        timed("fd_central", 1.0, "approximate", n_blocks=1), timed("jacrev", 3)
    )
    assert one_block.best == "jacrev" and "no confidence interval for fd_central" in (
        one_block.sentence()
    )
    # a noisy warning alone decides nothing: the intervals do
    noisy = recommendation(timed("fd_central", 1.0, "approximate", noisy=True), timed("jacrev", 3))
    assert noisy.best == "fd_central"

    clear = recommendation(
        timed("fd_central", 1.0, "approximate"), timed("jacrev", 2.0), timed("jacfwd", 2.5)
    )
    assert clear.best == "fd_central" and clear.alternative.name == "jacrev"
    text = clear.sentence()
    assert "use **fd_central** (1 ms), approximate (err_eps 1e+03)" in text
    assert "Exact alternative: jacrev (2 ms, err_eps 2), 2x slower" in text

    slower = recommendation(timed("fd_central", 3.0, "approximate"), timed("jacrev", 1.0))
    assert slower.best == "jacrev" and slower.alternative is None


def test_report_and_mlflow_description_show_the_same_pick_and_alternative(tmp_path):
    from jacbench.report.overview import overview

    rows = frame(
        timed("fd_central", 1.0, "approximate"), timed("jacrev", 1.2), timed("functional", 6)
    )
    write_report(rows, tmp_path)
    report = (tmp_path / "report.md").read_text()
    view = overview(rows)
    rec = recommendation(*[make_result(**r) for r in rows.to_dict("records")])
    sentence = rec.sentence()  # the report's full sentence; the Overview's short line
    assert sentence in report and f"use **{rec.choice()}**" in view.description
    assert "Approximate alternative: fd_central" in sentence and "exact first" in report
    assert view.description.startswith(
        "**Recommended: jacrev (fd_central is 1.2x faster but approximate)**"
    )
    assert view.tags["recommended_strategy"] == "jacrev"
    assert view.tags["recommended_with_alternative"].startswith("jacrev (fd_central is 1.2x")


def texts_inside(fig) -> list[str]:
    """The texts of a figure (labels, ticks, titles, point names) drawn outside it."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    outside = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts = [ax.xaxis.label, ax.yaxis.label, ax.title, *ax.texts]
        low_x, high_x = sorted(ax.get_xlim())
        low_y, high_y = sorted(ax.get_ylim())
        texts += [t for t in ax.get_xticklabels() if low_x <= t.get_position()[0] <= high_x]
        texts += [t for t in ax.get_yticklabels() if low_y <= t.get_position()[1] <= high_y]
        for text in texts:
            if not text.get_text() or not text.get_visible():
                continue
            box = text.get_window_extent(renderer)
            if box.x0 < -1 or box.y0 < -1 or box.x1 > fig.bbox.x1 + 1 or box.y1 > fig.bbox.y1 + 1:
                outside.append(text.get_text())
    return outside


def plot_rows(*results):
    rows, _ = normalise(frame(*results))
    return rows, problems(rows)


def test_speed_vs_accuracy_names_its_points_without_overlap():
    from jacbench.report import plots

    _, groups = plot_rows(  # four points close together, and one far away
        timed("jacrev", 1.00),
        timed("jacfwd", 1.02),
        timed("functional", 1.04),
        timed("vmap_vjp", 1.01),
        timed("fd_central", 0.1, "approximate"),
    )
    fig = plots.speed_vs_accuracy(groups)
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.texts]
    assert sorted(names) == ["fd_central", "functional", "jacfwd", "jacrev", "vmap_vjp"]
    renderer = drawn(fig)  # names' words, not the boxes around their slanted leader lines
    assert not misreadings(ax, renderer) and not crossings(ax, renderer)
    assert not texts_inside(fig)


def test_label_boxes_are_computed_where_matplotlib_draws_the_labels():
    """name_points measures a label once and computes its box at every offset: each computed
    box must be the drawn one, on log axes, left and right of the point, near and far."""
    import matplotlib.pyplot as plt

    from jacbench.report import plots

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.scatter([1e-4, 1e-2], [1.0, 100.0])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    xy = (1e-3, 10.0)
    anchor = tuple(ax.transData.transform(xy))
    first = plots._annotate(ax, "jacrev_compiled", xy, plots.OFFSETS[0])
    size = (first.get_window_extent(renderer).width, first.get_window_extent(renderer).height)
    for offset in plots.OFFSETS:
        drawn = plots._annotate(ax, "jacrev_compiled", xy, offset)
        drawn.update_positions(renderer)
        real = Text.get_window_extent(drawn, renderer)
        box = plots._label_box(anchor, size, offset, fig.dpi / 72.0)
        assert max(abs(a - b) for a, b in zip(box.extents, real.extents, strict=True)) < 1.0
    plt.close(fig)


def test_accuracy_plot_keeps_its_error_label_inside_the_figure():
    from jacbench.report import plots

    rows, _ = plot_rows(timed("jacrev", 1.0), timed("fd_central", 0.5, "approximate"))
    fig = plots.accuracy_per_strategy(rows)
    assert fig.axes[0].get_xlabel().startswith("err_eps")  # strategies down the y axis
    assert not texts_inside(fig)


def test_time_plot_sizes_each_panel_by_its_strategies():
    from jacbench.report import plots

    names = [f"strategy_{i}" for i in range(12)]

    def problem(n: int, count: int):
        return [
            timed(s, 1.0 + i, n_in=n, config_hash=f"{s}{n}", job_id=f"{i}-{n}".ljust(16, "0"))
            for i, s in enumerate(names[:count])
        ]

    one = plots.time_per_strategy(plot_rows(*problem(3, 2))[1])
    rows = [r for n, count in ((3, 2), (5, 12), (7, 3), (9, 4)) for r in problem(n, count)]
    fig = plots.time_per_strategy(plot_rows(*rows)[1])
    assert len(fig.axes) == 4
    fig.canvas.draw()
    heights = {
        len(ax.get_yticks()): ax.get_window_extent().height / fig.dpi for ax in fig.axes
    }  # inches per panel, by its number of strategies
    assert all(height / count >= 0.25 for count, height in heights.items()), heights
    assert heights[12] > 2 * heights[2]
    assert fig.get_size_inches()[1] > one.get_size_inches()[1]
    assert not texts_inside(fig)


def test_shape_plot_draws_one_curve_per_model_family():
    import json

    from jacbench.report import plots

    def shaped(target: str, n: int, strategy: str, mode: str, ms: float):
        options = json.dumps({"_target_": target, "name": "custom", "n_in": n, "n_out": 16})
        return timed(
            strategy,
            ms,
            model="custom",
            strategy_mode=mode,
            n_in=n,
            n_out=16,
            model_options=options,
            config_hash=f"{target}{n}{strategy}",
            job_id=f"{target[-4:]}{n}{strategy}".ljust(16, "0")[:16],
        )

    rows = [
        shaped(target, n, strategy, mode, n * scale)
        for target, scale in (("my.models.Net", 0.1), ("other.Pde", 0.3))
        for n in (4, 16, 64)
        for strategy, mode in (("jacfwd", "forward"), ("jacrev", "reverse"))
    ]
    fig = plots.time_vs_shape(plot_rows(*rows)[1])
    labels = sorted(fig.axes[0].get_legend_handles_labels()[1])
    assert labels == [
        "forward (custom[Net] float32)",
        "forward (custom[Pde] float32)",
        "reverse (custom[Net] float32)",
        "reverse (custom[Pde] float32)",
    ]
    assert all(len(line.get_xdata()) == 3 for line in fig.axes[0].get_lines())


def test_an_answers_prose_wraps_and_its_tables_keep_their_columns():
    """Issue 44: answer.md was one fenced block whose long lines MLflow's viewer showed
    without wrapping."""
    from jacbench.record.markdown import wrapped_prose

    table = "strategy  dtype    median [95% interval]     time / loop  " + "x" * 60
    prose = "Answer: " + "a word " * 40
    text = wrapped_prose(f"{table}\n{prose}\n- " + "bullet " * 30)
    lines = text.splitlines()
    assert lines[0] == table  # a table row, however long, stays one line
    assert all(len(line) <= 100 for line in lines[1:])
    assert lines[1].startswith("Answer: ") and len(lines) > 4
    bullet = lines.index(next(line for line in lines if line.startswith("- ")))
    assert lines[bullet + 1].startswith("  bullet")  # under the bullet's text


def test_a_long_problem_title_stays_inside_the_time_figure():
    """A custom model's long name: the time figure's title, centred over the axes right of
    the strategy names, was cut at the figure's right edge."""
    from jacbench.report import plots

    model = "my_lab_custom_residual_network_with_a_long_descriptive_name_for_its_paper_v2"
    long_name = "our_plugins_forward_mode_strategy_with_batched_tangents_v3"
    _, groups = plot_rows(timed(long_name, 1.0, model=model), timed("jacrev", 2.0, model=model))
    fig = plots.time_per_strategy(groups)
    assert not texts_inside(fig)
