"""The report's figures as a reader sees them (issue: figures too small to read): every
label at least 9 pt at the width report.html shows it, no two texts overlapping, log axes
for times and errors, tolerance lines, the pick starred, spy plots only of sparse patterns."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from PIL import Image

from helpers.results import make_result
from jacbench.report import heatmaps, plots
from jacbench.report.build import CAPTIONS, write_report
from jacbench.report.problems import normalise, problems
from jacbench.report.render import PAGE_PX

MIN_PT = 9.0  # the smallest readable label on a page (about 12 CSS px)


def row(strategy: str, ms: float, n: int = 8, **changes):
    """An ok job of problem mlp(N=n): a settled timing (+-2%), exact unless told."""
    kind = changes.pop("kind", "exact")
    approximate = kind == "approximate"
    eps = 2.0**-52 if changes.get("dtype") == "float64" else 2.0**-23
    key = f"{changes.get('model', 'mlp')}-{strategy}-{n}-{changes.get('dtype', '')}-{ms}"
    fields = {
        "strategy_mode": "numeric" if approximate else "forward",
        "err_eps": 3e5 if approximate else 0.8,
        "tolerance": min(0.1, 100 * eps**0.5) if approximate else 100 * eps,
        "n_in": n,
        "n_out": 6,
        "config_hash": key + changes.get("strategy_options", ""),
        "job_id": hashlib.md5((key + changes.get("strategy_options", "")).encode()).hexdigest()[
            :16
        ],
        **changes,
    }
    return make_result(strategy=strategy, strategy_kind=kind, time_median_s=ms * 1e-3, **fields)


def tridiagonal(n: int) -> list[float]:
    return [1.0 if abs(i - j) <= 1 else 0.0 for i in range(n) for j in range(n)]


def realistic_rows() -> pd.DataFrame:
    """Problems like a sweep's: times across four decades, close times, an exact method at
    err_eps 0, approximate ones near 1e6, long strategy names, an eps sweep, a shape sweep,
    a sparse and a dense pattern."""
    results = []
    options = json.dumps(
        {"compile": False, "detect_points": 3, "output": "dense", "pattern": "auto"}
    )
    for n, scale in ((8, 1.0), (64, 30.0)):
        results += [
            row("jacfwd", 0.9 * scale, n),
            row("jacrev", 1.1 * scale, n, strategy_mode="reverse"),
            row("vmap_vjp", 1.15 * scale, n, strategy_mode="reverse"),
            row("functional", 240 * scale, n, strategy_mode="reverse", err_eps=0.0),
            row("fd_central", 0.2 * scale, n, kind="approximate", err_eps=1.2e5),
            row("sparse_jacfwd", 0.5 * scale, n, n_colors=3, strategy_options=options),
            row("jacfwd_compiled", 0.95 * scale, n, dtype="float64", err_eps=3.0),
            row("jacrev", 1.0 * scale, n, dtype="float64", strategy_mode="reverse"),
        ]
    for eps, err in ((1e-1, 1e-2), (1e-3, 1e-5), (1e-5, 1e-6), (1e-7, 1e-3)):
        results.append(
            row(
                "fd_forward",
                0.3,
                8,
                kind="approximate",
                rel_err=err,
                strategy_options=json.dumps({"eps": eps}),
                config_hash=f"fd{eps}",
                job_id=f"fd{eps}".ljust(16, "0")[:16],
            )
        )
    for n in (4, 16, 64):
        for strategy, mode, ms in (("jacfwd", "forward", n * 1e-3), ("jacrev", "reverse", 0.01)):
            results.append(
                row(strategy, ms, n, model="tanh", n_out=16, strategy_mode=mode, jacobian=None)
            )
    sparse = {"model": "burgers", "n_in": 12, "n_out": 12, "n_colors": 3}
    results.append(
        row("sparse_jacfwd", 0.05, pattern_density=34 / 144, jacobian=tridiagonal(12), **sparse)
    )
    results.append(row("jacfwd", 0.2, model="burgers", n_in=12, n_out=12))
    dense = {"model": "dense", "n_in": 6, "n_out": 6, "n_colors": 6, "pattern_density": 1.0}
    results.append(row("sparse_jacfwd", 0.05, jacobian=[1.0] * 36, **dense))
    for n, m in ((4, 4), (4, 256), (256, 4), (256, 256)):  # a map: N x M, three strategies
        shape = {"n_out": m, "model": "map_dense", "jacobian": None}
        for strategy, mode, ms in (
            ("jacfwd", "forward", n * 1e-3),
            ("jacrev", "reverse", m * 1e-3),
            ("auto", "auto", min(n, m) * 1.2e-3),
        ):
            key = f"map-{strategy}-{n}-{m}"
            job = hashlib.md5(key.encode()).hexdigest()[:16]
            results.append(row(strategy, ms, n, strategy_mode=mode, job_id=job, **shape))
    return normalise(pd.DataFrame([r.__dict__ for r in results]))[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of the realistic rows, with the figures it drew (drawn again to measure)."""
    out = tmp_path_factory.mktemp("report")
    rows = realistic_rows()
    figures: dict = {}

    def keeping(real):
        def keep(*args):
            drawn = real(*args)
            figures.update(drawn)
            return drawn

        return keep

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "all_plots", keeping(plots.all_plots))
        patch.setattr(heatmaps, "heat_maps", keeping(heatmaps.heat_maps))
        write_report(rows, out)
    return out, figures, rows


def drawn(fig) -> list[Text]:
    """Every text matplotlib really draws (whatever plots.py thinks it draws)."""
    seen: list[Text] = []
    original = Text.draw
    if not hasattr(fig.canvas, "get_renderer"):  # closed by write_report: a canvas again
        FigureCanvasAgg(fig)

    def record(self, renderer):
        if self.get_visible() and self.get_text():
            seen.append(self)
        return original(self, renderer)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Text, "draw", record)
        fig.canvas.draw()
    return seen


@pytest.fixture(scope="module")
def texts(report) -> dict[str, list[Text]]:
    """Each figure's drawn texts, the figure drawn once for the tests that measure them."""
    _, figures, _ = report
    return {name: drawn(fig) for name, fig in figures.items()}


def png_width(path: Path) -> int:
    """A PNG's width in pixels, from its header (nothing decoded)."""
    with Image.open(path) as image:
        return image.width


def shown_widths(out: Path) -> dict[str, int]:
    """The CSS width report.html gives each figure, by name (from its alt text)."""
    page = (out / "report.html").read_text()

    by_caption = {caption: name for name, caption in CAPTIONS.items()}
    widths = re.findall(r"<img alt='([^']*)' width='(\d+)'", page)
    return {by_caption[caption.replace("&#x27;", "'")]: int(w) for caption, w in widths}


def smallest_shown_pt(out: Path, name: str, texts: list[Text]) -> float:
    """The smallest label's size (pt) as report.html shows it: its pixels in the PNG,
    scaled to the width the page gives the image, at 96 CSS px per inch."""
    scale = shown_widths(out)[name] / png_width(out / f"{name}.png")  # CSS px per PNG px
    return min(t.get_fontsize() * plots.DPI / 72 * scale * 72 / 96 for t in texts)


def test_the_realistic_rows_give_every_figure_but_a_dense_spy_plot(report):
    out, figures, _ = report
    assert set(figures) == set(CAPTIONS)  # every figure the report knows
    titles = [ax.get_title() for ax in figures["sparsity_pattern"].axes]
    assert len(titles) == 1 and titles[0].startswith("burgers")  # not the dense one


def test_figures_are_200_dpi_png_with_an_svg_and_a_set_display_width(report):
    out, figures, _ = report
    widths = shown_widths(out)
    assert set(widths) == set(figures)
    markdown = (out / "report.md").read_text()
    for name, fig in figures.items():
        # Agg truncates the pixel width (6.548 in at 200 dpi: 1309 px, not 1310)
        assert abs(png_width(out / f"{name}.png") - fig.get_figwidth() * 200) < 1, name
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
        assert widths[name] == plots.display_width(fig) <= PAGE_PX
        assert f"]({name}.png)" in markdown and "<img" not in markdown  # MLflow shows tags
    assert "figure{margin:1em 0}" in (out / "report.html").read_text()  # the full page width


def test_every_label_is_at_least_9_pt_where_the_report_shows_it(report, texts):
    out, figures, _ = report
    sizes = {name: smallest_shown_pt(out, name, texts[name]) for name in figures}
    assert all(size >= MIN_PT - 0.01 for size in sizes.values()), sizes


def test_no_two_texts_of_a_figure_overlap(report, texts):
    _, figures, _ = report
    for name, fig in figures.items():
        renderer = fig.canvas.get_renderer()
        boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in texts[name]]
        overlaps = [
            (a, b)
            for i, (a, box) in enumerate(boxes)
            for b, other in boxes[i + 1 :]
            if box.overlaps(other)
        ]
        assert not overlaps, (name, overlaps)
        outside = [
            text
            for text, box in boxes
            if box.x0 < -1 or box.y0 < -1 or box.x1 > fig.bbox.x1 + 1 or box.y1 > fig.bbox.y1 + 1
        ]
        assert not outside, (name, outside)


def test_times_and_errors_are_on_log_axes_with_exact_zero_drawn(report):
    _, figures, _ = report
    time = figures["time_per_strategy"]
    assert all(ax.get_xscale() == "log" for ax in time.axes)
    assert figures["accuracy_per_strategy"].axes[0].get_xscale() == "log"
    for ax in figures["speed_vs_accuracy"].axes:
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    zero = panel(figures["speed_vs_accuracy"], "N=8, M=6) float32").get_ylabel()
    assert "0 drawn at" in zero  # functional's err_eps of exactly 0
    for name in ("fd_error_vs_eps", "time_vs_shape"):
        ax = figures[name].axes[0]
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert "[ms]" in time.axes[0].get_xlabel()


def panel(fig, title: str):
    """The panel of the problem whose title contains ``title`` (titles are wrapped)."""
    (ax,) = [ax for ax in fig.axes if title in ax.get_title().replace("\n", " ")]
    return ax


def tolerance_lines(ax) -> list[float]:
    lines = [line for line in ax.get_lines() if line.get_label() == "_tolerance"]
    return sorted(
        {
            float(
                line.get_xdata()[0]
                if line.get_xdata()[0] == line.get_xdata()[1]
                else line.get_ydata()[0]
            )
            for line in lines
        }
    )


def test_accuracy_plots_draw_the_tolerances_in_err_eps(report):
    _, figures, _ = report
    exact, approximate = 100, 100 * 2.0 ** (23 / 2)  # float32: 100 eps, 100 sqrt(eps)
    for name in ("accuracy_per_strategy", "speed_vs_accuracy"):
        ax = (
            panel(figures[name], "N=8, M=6) float32")
            if name != "accuracy_per_strategy"
            else (figures[name].axes[0])
        )
        found = tolerance_lines(ax)
        assert found == pytest.approx([float(f"{exact:.3g}"), float(f"{approximate:.3g}")])
        legend = [t.get_text() for t in figures[name].legends[0].get_texts()]
        assert any(text.startswith("tolerance, approximate") for text in legend), legend


def test_the_pick_is_starred_on_the_time_and_speed_vs_accuracy_plots(report):
    _, figures, rows = report
    from jacbench.report.analysis import recommend

    ((title, group),) = [(t, g) for t, g in problems(rows) if "N=8, M=6) float32" in t]
    rec = recommend(title, group)
    assert rec.best and not rec.unsettled
    best = group[group["label"] == rec.best].iloc[0]
    for name in ("time_per_strategy", "speed_vs_accuracy"):
        ax = panel(figures[name], title)
        stars = [c for c in ax.collections if c.get_label() == "_pick"]
        assert len(stars) == 1, name
        x = stars[0].get_offsets()[0][0]
        assert x == pytest.approx(best["time_median_s"] * 1e3)
    names = [t.get_text() for t in panel(figures["speed_vs_accuracy"], title).texts]
    assert f"{rec.best} (pick)" in names


def test_a_dense_pattern_gets_no_spy_plot():
    dense = {"model": "dense", "n_in": 6, "n_out": 6, "n_colors": 6, "pattern_density": 1.0}
    rows = normalise(
        pd.DataFrame([row("sparse_jacfwd", 0.05, jacobian=[1.0] * 36, **dense).__dict__])
    )[0]
    assert plots.sparsity_pattern(rows) is None


def test_tables_and_sentences_give_times_and_speedups_to_three_digits(tmp_path):
    """Times in the unit the text uses, speedups without false precision or exponents."""
    from jacbench.report.display import seconds_text
    from jacbench.timing.rule import digits

    assert [digits(r) for r in (263.9, 1.4, 1.456, 1234.5)] == ["264", "1.4", "1.46", "1234"]
    assert [seconds_text(s) for s in (1.065e-3, 13.94, 2.5e-5)] == ["1.06 ms", "13.9 s", "25 us"]
    rows = pd.DataFrame(
        [
            row("jacrev", 1.065, strategy_mode="reverse").__dict__,
            row("jacfwd", 1.49).__dict__,
            row("functional", 281.0, strategy_mode="reverse").__dict__,
            row("jacrev", 13940.0, 9, strategy_mode="reverse").__dict__,
            row("functional", 17.2e6, 9, strategy_mode="reverse").__dict__,
        ]
    )
    write_report(rows, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "| jacrev | exact | reverse | ok | 1.06 ms [1.04-1.09] | 264x |" in text
    assert "| jacfwd | exact | forward | ok | 1.49 ms [1.46-1.52] | 189x |" in text
    assert "runner-up jacfwd (1.4x slower); 264x faster than functional" in text
    assert "use **jacrev** (13.9 s)" in text and "1234x faster than functional" in text
    assert "e-0" not in text and "e+0" not in text


def two_dtype_differences() -> pd.DataFrame:
    """Issue 44: short names, an approximate tolerance per dtype: the legend was wider than
    the figure, its markers and 'err_eps 6.71e+09' cut at the edges."""
    rows = [
        row("fd_central", 0.2, dtype="float64", kind="approximate", err_eps=6.71e9, tolerance=1e-6),
        row("fd_forward", 0.3, dtype="float64", kind="approximate", err_eps=3e7, tolerance=1.5e-6),
        row("fd_central", 0.21, kind="approximate", err_eps=6.71e5),
        row("jacrev", 0.25),
        row("jacrev", 0.26, dtype="float64"),
    ]
    return normalise(pd.DataFrame([r.__dict__ for r in rows]))[0]


def test_no_legend_is_cut_at_the_figures_edges(report, texts):
    _, figures, _ = report  # drawn (texts)
    small = plots.accuracy_per_strategy(two_dtype_differences())
    FigureCanvasAgg(small).draw()
    for name, fig in [*figures.items(), ("two dtypes", small)]:
        page = fig.bbox
        for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
            if legend is None:
                continue
            box = legend.get_window_extent()
            assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1, (name, box, page)


def test_a_kinds_tolerances_in_two_dtypes_are_drawn_in_two_styles():
    fig = plots.accuracy_per_strategy(two_dtype_differences())
    styles = {line.get_label(): line.get_linestyle() for line in fig.legends[0].get_lines()}
    approximate = [s for label, s in styles.items() if "approximate" in label]
    assert len(approximate) == 2 and len(set(approximate)) == 2
    assert styles["tolerance, exact: err_eps 100"] == "--"


def test_every_time_axis_carries_its_intervals_and_no_name_covers_another_point(report):
    _, figures, _ = report
    for name in ("time_per_strategy", "speed_vs_accuracy", "time_vs_shape"):
        fig = figures[name]
        bars = [c for ax in fig.axes for c in ax.containers if hasattr(c, "has_xerr")]
        assert bars and all(b.has_xerr or b.has_yerr for b in bars), name
    fig = figures["speed_vs_accuracy"]
    FigureCanvasAgg(fig) if not hasattr(fig.canvas, "get_renderer") else None
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        points = [
            tuple(ax.transData.transform(xy))
            for collection in ax.collections
            if collection.get_label() and not collection.get_label().startswith("_")
            for xy in collection.get_offsets()
        ]
        for text in ax.texts:
            box = Text.get_window_extent(text, renderer)
            own = tuple(ax.transData.transform(text.xy))
            others = [p for p in points if p != own]
            assert not any(box.contains(*p) for p in others), text.get_text()


def test_a_family_swept_over_n_and_m_is_a_map_not_a_curve_of_n_over_m(report):
    _, figures, _ = report
    labels = figures["time_vs_shape"].axes[0].get_legend_handles_labels()[1]
    assert labels and not any("map_dense" in label for label in labels)


def test_points_of_different_problems_are_told_apart():
    """Issue 44: the accuracy plot drew every problem's point of a strategy alike."""
    rows = pd.concat(
        [two_dtype_differences(), normalise(pd.DataFrame([row("jacrev", 0.3, 64).__dict__]))[0]]
    )
    fig = plots.accuracy_per_strategy(rows)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "mlp (N=8, M=6)" in legend and "mlp (N=64, M=6)" in legend
    ax = fig.axes[0]
    jacrev = ax.get_yticklabels().index(
        next(t for t in ax.get_yticklabels() if t.get_text() == "jacrev")
    )
    markers, rows_at = set(), set()
    for collection in ax.collections:
        for _x, y in collection.get_offsets():
            if round(y) == jacrev:
                markers.add(collection.get_paths()[0].vertices.tobytes())
                rows_at.add(round(float(y), 3))
    assert len(markers) == 2  # two problems' jacrev points, each with its own marker
    assert len(rows_at) >= 2  # and side by side within the strategy's row, not one on another


def test_a_sweep_of_many_problems_draws_no_figure_a_panel_per_problem(tmp_path):
    """The map's 150 problems would make per-problem figures 90000 px tall: they are left out,
    and the report says why."""
    many = [row("jacrev", 0.1 + i / 100, 2 + i) for i in range(plots.MAX_PROBLEM_PANELS + 1)]
    rows = normalise(pd.DataFrame([r.__dict__ for r in many]))[0]
    written = {p.name for p in write_report(rows, tmp_path)}
    assert "time_per_strategy.png" not in written and "speed_vs_accuracy.png" not in written
    assert (
        "drawn for up to 20 problems; this result set has 21"
        in (tmp_path / "report.md").read_text()
    )
