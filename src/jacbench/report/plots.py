"""Headless matplotlib figures of a result set: each a Figure, or None where the rows hold no
data for it. Sizes are inches as read (report.html shows ``CSS_PX_PER_IN`` px per inch): no
label is below ``SMALL`` pt on the page; ``finish`` makes the saved image the one measured."""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.axis import Axis  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.path import Path as MplPath  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
)
from matplotlib.transforms import Bbox  # noqa: E402

from jacbench.core.enums import Kind, Mode
from jacbench.record.result import Status
from jacbench.report.analysis import recommend  # noqa: E402
from jacbench.report.problems import latest_ok, parse_options, standing  # noqa: E402
from jacbench.report.problems import problems as by_problem  # noqa: E402
from jacbench.report.render import PAGE_PX  # noqa: E402

FONT = 10  # points: titles, axis and tick labels
SMALL = 9  # points: point names and legends, the smallest text drawn
CSS_PX_PER_IN = 96  # a browser's px per inch: shown at this scale, a point is a point
MAX_WIDTH_IN = 11.0  # the widest figure: 1056 px, inside report.html's PAGE_PX
DPI = 200  # of the saved PNG: sharp on high-density screens at the shown size
ZERO_ERR = 1e-2  # err_eps of exactly 0 drawn here on a log axis
KIND_COLORS: dict[str, str] = {  # Kind is a str: looked up by kind or its text
    Kind.EXACT: "tab:blue",
    Kind.APPROXIMATE: "tab:orange",
    Kind.NEGATIVE_CONTROL: "tab:red",
}
KIND_MARKERS = {Kind.EXACT: "o", Kind.APPROXIMATE: "D", Kind.NEGATIVE_CONTROL: "x"}
DTYPE_MARKERS = {"float64": "s", "float32": "o", "float16": "^", "bfloat16": "v"}
PROBLEM_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<")  # up to 8 problems told apart
MAX_PROBLEM_PANELS = 20  # figures with a panel per problem: drawn up to this many problems
# machine epsilon per dtype name: the err_eps unit, for the tolerance lines (no torch here)
DTYPE_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
TOLERANCE_STYLES = ("--", ":", "-.", (0, (5, 2, 1, 2)))
PICK_STYLE: dict[str, Any] = {
    "marker": "*",
    "s": 380,
    "color": "gold",
    "edgecolors": "black",
    "zorder": 1.5,
}
SPY_MAX_DENSITY = 0.6  # above it a spy plot is mostly ink: it says no more than its density
assert MAX_WIDTH_IN * CSS_PX_PER_IN <= PAGE_PX


def display_width(fig: Figure) -> int:
    """The width (CSS px) report.html shows ``fig`` at: its inches at the browser's scale."""
    return round(fig.get_figwidth() * CSS_PX_PER_IN)


def _wrap(text: str, width: int) -> str:
    """Long strategy names broken after commas (or spaces), at most ``width`` characters a line."""
    lines = [""]
    for part in text.replace(",", ",\0").replace(" ", " \0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(line.rstrip() for line in lines)


def _tick_text(value: float, _pos: object = None) -> str:
    """A log axis' tick as a plain number (``0.5``, ``20``, ``1e6``): no superscripts,
    which are drawn at 70% of the label's size."""
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:g}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def log_axis(ax, which: str, label: str) -> None:
    """A log axis labelled with plain numbers at 1, 2 and 5 of each decade (only decades
    where they are many; ``_finish`` adds more where fewer than three fall in view)."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_tick_text))
    axis.set_minor_formatter(NullFormatter())
    axis.set_label_text(label, fontsize=FONT)


def panel_grid(
    n: int, cols: int, panel_in: tuple[float, float], pad_in: tuple[float, float] = (0.0, 0.0)
) -> tuple[Figure, list]:
    """``n`` panels of ``panel_in`` inches in rows of ``cols`` (at most ``MAX_WIDTH_IN``
    wide), plus ``pad_in``; the grid's cells beyond ``n`` removed."""
    cols = min(cols, n)
    rows = math.ceil(n / cols)
    width = min(MAX_WIDTH_IN, panel_in[0] * cols + pad_in[0])
    size = (width, panel_in[1] * rows + pad_in[1])
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False, layout="constrained")
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def _axes(fig: Figure) -> list[Axis]:
    return [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]


def _style(ax) -> None:
    ax.tick_params(which="both", labelsize=FONT)
    ax.title.set_fontsize(FONT)
    for axis in (ax.xaxis, ax.yaxis):
        axis.label.set_fontsize(FONT)


def _ticks_in_view(axis: Axis) -> list:
    """The ticks the last draw placed in view, in the axis's scale with matplotlib's slack."""
    scale = axis.get_transform()
    low, high = sorted(scale.transform(np.asarray(axis.get_view_interval(), dtype=float)))
    slack = 1e-10 * (high - low)
    ticks = [
        *axis.get_major_ticks(len(axis.get_majorticklocs())),
        *axis.get_minor_ticks(len(axis.get_minorticklocs())),
    ]
    where = scale.transform(np.asarray([t.get_loc() for t in ticks], dtype=float).reshape(-1))
    return [t for t, at in zip(ticks, where, strict=True) if low - slack <= at <= high + slack]


def _tick_labels(ax) -> list[tuple[Axis, float, bool, Text]]:
    """The tick labels drawn now: (axis, tick value, major, label)."""
    found = []
    for axis in (ax.xaxis, ax.yaxis):
        majors = set(axis.get_majorticklocs())
        for tick in _ticks_in_view(axis):
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text():
                    found.append((axis, tick.get_loc(), tick.get_loc() in majors, label))
    return found


def drawn_texts(fig: Figure) -> list[Text]:
    """Every non-empty visible text of a drawn figure (tick labels: those in view)."""
    return [label for ax in fig.axes for *_, label in _tick_labels(ax)] + _other_texts(fig)


def _other_texts(fig: Figure) -> list[Text]:
    """The non-empty visible texts of a figure, in shown axes, that are no tick label."""
    ticks = [tick for axis in _axes(fig) for tick in (*axis.majorTicks, *axis.minorTicks)]
    labels = {id(label) for tick in ticks for label in (tick.label1, tick.label2)}
    texts = [t for t in fig.findobj(Text) if id(t) not in labels]
    return [
        t
        for t in texts
        if t.get_visible() and t.get_text() and (t.axes is None or t.axes.get_visible())
    ]


def _enough_log_ticks(fig: Figure) -> None:
    """Where fewer than three labelled ticks of a log axis fall in view, label the decades,
    then every integer mantissa, then two rounded values inside the span."""
    for axis in _axes(fig):
        if axis.get_scale() != "log":
            continue
        low, high = sorted(axis.get_view_interval())
        inside = [float(f"{v:.2g}") for v in np.geomspace(low, high, 4)[1:3]]
        for locator in (LogLocator(), LogLocator(subs=tuple(range(1, 10))), None):
            if sum(low <= v <= high for v in axis.get_majorticklocs()) >= 3:
                break
            axis.set_major_locator(locator or FixedLocator(inside))


def finish(fig: Figure) -> Figure:
    """Lay the figure out, freeze its layout and ticks (its boxes are then the saved
    figure's), and blank each tick label that would collide with a text already kept."""
    fig.draw_without_rendering()
    _enough_log_ticks(fig)
    fig.draw_without_rendering()
    fig.set_layout_engine("none")  # what is measured below is what is saved
    for axis in _axes(fig):
        axis.set_major_locator(FixedLocator(axis.get_majorticklocs().tolist()))
        axis.set_minor_locator(FixedLocator(axis.get_minorticklocs().tolist()))
    renderer = _renderer(fig)
    ticks = [entry for ax in fig.axes for entry in _tick_labels(ax)]
    kept = [t.get_window_extent(renderer) for t in _other_texts(fig)]
    for *_, label in sorted(ticks, key=_tick_priority):
        points = label.get_fontproperties().get_size_in_points()
        gap = 0.3 * points * fig.dpi / 72  # a space between neighbours
        box = label.get_window_extent(renderer).padded(gap / 2, 0)
        if any(box.overlaps(other) for other in kept):
            label.set_visible(False)  # the ticks are fixed: a later draw keeps it hidden
        else:
            kept.append(box)
    return fig


def _renderer(fig: Figure) -> RendererAgg:
    """The renderer a figure was laid out with: Agg's (``matplotlib.use("Agg")`` above)."""
    canvas = fig.canvas
    if not isinstance(canvas, FigureCanvasAgg):
        raise TypeError(f"jacbench draws its figures with Agg, not {type(canvas).__name__}")
    return canvas.get_renderer()


def _tick_priority(entry) -> tuple[bool, bool, float]:
    axis, value, major, _ = entry
    decade = axis.get_scale() == "log" and value > 0 and math.log10(value).is_integer()
    return (not major, not decade, abs(value))


def figure_legend(fig: Figure, handles: list, ncols: int = 3) -> None:
    """One legend above the panels (it hides no point), in as many columns (up to ``ncols``)
    as fit; the figure widened where one column does not, so no entry is cut."""
    unique = {h.get_label(): h for h in handles}
    for columns in range(min(ncols, len(unique)), 0, -1):
        legend = fig.legend(
            list(unique.values()),
            list(unique),
            loc="outside upper center",
            ncols=columns,
            fontsize=SMALL,
            frameon=False,
        )
        # its width alone, without laying the whole figure out (a draw each try is dear)
        width = legend.get_window_extent(_renderer(fig)).width / fig.dpi
        if width <= fig.get_figwidth() or columns == 1:
            break
        legend.remove()
    if width > fig.get_figwidth():
        fig.set_figwidth(min(MAX_WIDTH_IN, width + 0.2))


def _tolerances(rows: pd.DataFrame) -> dict[tuple[str, float], str]:
    """Each tolerance of the rows in err_eps (tolerance / eps of the dtype) by kind, named
    by the kind alone where its dtypes share it (exact: 100 in every dtype)."""
    found: dict[tuple[str, float], list[str]] = {}
    for (kind, dtype), group in rows.groupby(["strategy_kind", "dtype"]):
        eps, tol = DTYPE_EPS.get(str(dtype)), _least_tolerance(group)
        if eps and tol:
            found.setdefault((str(kind), float(f"{tol / eps:.3g}")), []).append(str(dtype))
    shared = {kind for kind, _ in found if sum(k == kind for k, _ in found) == 1}
    return {
        (kind, value): kind if kind in shared else f"{kind} {', '.join(dtypes)}"
        for (kind, value), dtypes in found.items()
    }


def _least_tolerance(rows: pd.DataFrame) -> float | None:
    """The rows' smallest positive tolerance, None where they record none."""
    tol = pd.to_numeric(rows["tolerance"], errors="coerce").dropna()
    return float(tol.min()) if len(tol) and tol.min() > 0 else None


KIND_TOLERANCE_STYLES: dict[str, str] = {
    Kind.EXACT: "--",
    Kind.APPROXIMATE: ":",
    Kind.NEGATIVE_CONTROL: "-.",
}


def _tolerance_lines(ax, rows: pd.DataFrame, vertical: bool = False) -> list[Line2D]:
    """The rows' tolerances drawn across ``ax``, each in a line style of its own (a kind's
    tolerances in several dtypes told apart); returns their legend entries."""
    found = sorted(_tolerances(rows).items())
    firsts = {kind: (kind, value) for (kind, value), _ in reversed(found)}  # each kind's first
    dashes: dict[tuple[str, float], object] = {
        key: KIND_TOLERANCE_STYLES.get(kind, "-.") for kind, key in firsts.items()
    }
    for key, _ in found:  # the same kind in another dtype: a style no other line has
        if key not in dashes:
            used = set(dashes.values())
            dashes[key] = next((d for d in TOLERANCE_STYLES if d not in used), "-.")
    return [
        _across(ax, value, dashes[(kind, value)], f"tolerance, {who}: err_eps {value:g}", vertical)
        for (kind, value), who in found
    ]


def _across(ax, value: float, dash: Any, label: str, vertical: bool = False) -> Line2D:
    """A tolerance line across ``ax`` at ``value``; returns its legend entry."""
    style: dict[str, Any] = {"ls": dash, "lw": 1.2, "color": "0.3"}
    (ax.axvline if vertical else ax.axhline)(value, label="_tolerance", **style)
    return Line2D([], [], label=label, **style)


def _pick_names(labels, pick: str | None, width: int) -> list[str]:
    """Each label wrapped to ``width``, the pick's marked as such."""
    return [_wrap(label + (" (pick)" if label == pick else ""), width) for label in labels]


def _star(ax, x, y) -> Line2D:
    """The pick's star at (``x``, ``y``); returns its legend entry."""
    ax.scatter(x, y, label="_pick", **PICK_STYLE)
    star = {k: v for k, v in PICK_STYLE.items() if k not in ("s", "zorder", "edgecolors")}
    return Line2D([], [], ls="", ms=14, mec="black", label="recommended (the pick)", **star)


def _name_axis(ax, names: list[str]) -> None:
    """A categorical y axis of ``names``, the first on top."""
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.invert_yaxis()


def _err_axis(ax, which: str, rows: pd.DataFrame, label: str) -> None:
    """A log err_eps axis, saying where an error of exactly 0 is drawn (``ZERO_ERR``)."""
    zero = f"; 0 drawn at {ZERO_ERR:g}" if (rows["err_eps"] <= 0).any() else ""
    log_axis(ax, which, label + zero)


def interval_bars(rows: pd.DataFrame) -> np.ndarray:
    """Left and right bar lengths: the median's 95% interval; zero without one (drawn hollow)."""
    median = rows["time_median_s"].astype(float)
    low = pd.to_numeric(rows.get("time_ci_low_s"), errors="coerce").fillna(median)
    high = pd.to_numeric(rows.get("time_ci_high_s"), errors="coerce").fillna(median)
    return np.vstack([(median - low).clip(lower=0), (high - median).clip(lower=0)])


TIME_LABEL = "median time per Jacobian [ms] (bar: 95% interval of the median)"
NAME_WIDTH = 45  # characters a line of a strategy name on an axis
INCH_PER_CHAR = 0.085  # of a FONT-pt label, wide characters counted
NAMES_PAD_IN = 0.8  # beside the names: the ticks and the figure's margins
TITLE_CHARS_PER_IN = 11  # FONT-pt characters an inch, wide ones counted


def _names_width(names) -> float:
    """Figure width (inches) for an axis of ``names`` beside a plot at least 5 in wide."""
    longest = max((len(line) for name in names for line in name.split("\n")), default=0)
    return min(MAX_WIDTH_IN, 5.5 + INCH_PER_CHAR * longest)


def _row_pitch(names) -> float:
    """Inches per row of a categorical axis: room for its tallest (wrapped) name."""
    return 0.2 + 0.17 * max((name.count("\n") + 1 for name in names), default=1)


def time_per_strategy(
    problems: list[tuple[str, pd.DataFrame]], picks: dict[str, str] | None = None
) -> Figure | None:
    """Median time (ms, log axis, bar: 95% interval) of every ok strategy, coloured by kind,
    the pick (``picks``: title -> label) starred; a panel per problem, as tall as its names."""
    picks = picks or {}
    panels = [(t, latest_ok(r).sort_values("time_median_s")) for t, r in problems]
    panels = [(t, r.reset_index(drop=True)) for t, r in panels if len(r)]
    if not panels:
        return None
    names = {t: _pick_names(rows["label"], picks.get(t), NAME_WIDTH) for t, rows in panels}
    heights = [_row_pitch(names[t]) * len(r) + 1.1 for t, r in panels]
    width = _names_width(n for t, _ in panels for n in names[t])
    # a title is centred over its axes, right of the names: wrapped to the axes' width
    longest = max(len(line) for t, _ in panels for n in names[t] for line in n.split("\n"))
    title_chars = int((width - INCH_PER_CHAR * longest - NAMES_PAD_IN) * TITLE_CHARS_PER_IN)
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(width, sum(heights) + 0.5),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    handles = []
    for ax, (title, rows) in zip(axes[:, 0], panels, strict=True):
        bars = interval_bars(rows) * 1e3
        for kind, group in rows.groupby("strategy_kind"):
            index = group.index
            handles.append(
                ax.errorbar(
                    group["time_median_s"] * 1e3,
                    index,
                    xerr=bars[:, index],
                    fmt=KIND_MARKERS.get(kind, "o"),
                    color=KIND_COLORS.get(kind, "0.3"),
                    capsize=3,
                    label=str(kind),
                )
            )
        pick = rows.index[rows["label"] == picks.get(title)]
        if len(pick):
            handles.append(_star(ax, rows.loc[pick, "time_median_s"] * 1e3, pick))
        _style(ax)
        _name_axis(ax, names[title])  # fastest on top
        log_axis(ax, "x", TIME_LABEL)
        ax.set_title(textwrap.fill(title, title_chars), fontsize=FONT)
    figure_legend(fig, handles)
    return finish(fig)


def accuracy_per_strategy(rows: pd.DataFrame) -> Figure | None:
    """err_eps (rounding units, log axis) per strategy, one series per dtype, with each
    tolerance as a line: how far each answer is from its verdict."""
    ok = rows[(rows["status"] == Status.OK) & rows["err_eps"].notna()]
    if ok.empty:
        return None
    labels = sorted(ok["label"].unique())
    names = [_wrap(label, NAME_WIDTH) for label in labels]
    fig, ax = plt.subplots(
        figsize=(_names_width(names), _row_pitch(names) * len(labels) + 2.0),
        layout="constrained",
    )
    # a problem without its dtype (colour tells that), its marker where few enough
    shapes = zip(ok["model"], ok["n_in"], ok["n_out"], strict=True)
    problem = [f"{model} (N={n}, M={m})" for model, n, m in shapes]
    problems_ = sorted(set(problem))
    told = len(problems_) <= len(PROBLEM_MARKERS)  # else a marker per dtype
    series = list(ok.assign(problem=problem if told else "").groupby(["problem", "dtype"]))
    colours = {d: f"C{i}" for i, d in enumerate(sorted(ok["dtype"].astype(str).unique()))}
    for i, ((name, dtype), group) in enumerate(series):
        shift = (i - (len(series) - 1) / 2) * min(0.6 / len(series), 0.12)  # side by side
        y = [labels.index(label) + shift for label in group["label"]]
        marker = PROBLEM_MARKERS[problems_.index(name)] if told else DTYPE_MARKERS.get(str(dtype))
        ax.scatter(
            group["err_eps"].clip(lower=ZERO_ERR),
            y,
            label="_point",
            color=colours[str(dtype)],
            marker=marker or "D",
            alpha=0.75,
        )
    handles = [Line2D([], [], ls="", marker="s", color=c, label=d) for d, c in colours.items()]
    if told:  # each problem's marker, so that points of different problems are told apart
        handles += [
            Line2D([], [], ls="", marker=PROBLEM_MARKERS[i], color="0.3", label=name)
            for i, name in enumerate(problems_)
        ]
    handles += _tolerance_lines(ax, ok, vertical=True)
    _style(ax)
    _name_axis(ax, names)
    _err_axis(ax, "x", ok, "err_eps (rel_err / machine eps)")
    figure_legend(fig, handles, ncols=2)
    return finish(fig)


NEAR_OFFSETS = [(6, 4), (6, -10), (-6, 4), (-6, -10)]  # beside the point: no leader line
# Label offsets (points) tried in turn: beside the point first, then further above and below
# with a leader line (straight up or down before aslant), right before left.
OFFSETS = NEAR_OFFSETS + [
    (dx, sign * dy)
    for across in ((9, -9), (40, -40))
    for dy in range(18, 180, 13)
    for sign in (1, -1)
    for dx in across
]
MARKER_HALF_PT = 3  # half a marker (points) kept clear of names: a point stays visible
PICK_HALF_PT = math.sqrt(PICK_STYLE["s"]) / 2  # half the pick's star (its size is in pt^2)
LABEL_GAP_PT = 3  # kept between two names
COVERED = 10  # a name over a name or a point: worse than any few crossed leader lines


def _leader(offset: tuple[int, int]) -> bool:
    """Whether a label at ``offset`` is joined to its point by a line (it is not beside it)."""
    return offset not in NEAR_OFFSETS


def _label_box(anchor: tuple[float, float], size: tuple[float, float], offset, scale: float):
    """Where a label of ``size`` (display units) written at ``offset`` points from the
    ``anchor`` (display units) would be drawn: left- or right-aligned, centred vertically."""
    (px, py), (width, height), (dx, dy) = anchor, size, offset
    x, y = px + dx * scale, py + dy * scale
    return Bbox.from_bounds(x if dx > 0 else x - width, y - height / 2, width, height)


def _annotate(ax, label: str, xy: tuple[float, float], offset: tuple[int, int]) -> Text:
    dx, dy = offset
    return ax.annotate(
        label,
        xy,
        xytext=offset,
        textcoords="offset points",
        fontsize=SMALL,
        ha="left" if dx > 0 else "right",
        va="center",
        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"} if _leader(offset) else None,
    )


def _told_apart(box: Bbox, own: tuple[float, float], others: list, margin: float) -> bool:
    """Whether a label beside its point reads as that point's: no other within ``margin``."""

    def distance(point: tuple[float, float]) -> float:  # to the box's nearest edge, 0 inside
        px, py = point
        return math.hypot(max(box.x0 - px, 0.0, px - box.x1), max(box.y0 - py, 0.0, py - box.y1))

    near = distance(own) + margin
    return all(distance(point) > near for point in others)


def name_points(ax, xs, ys, labels, renderer, clear_pt=None) -> None:
    """Write each label inside the laid-out axes at the first offset where it overlaps no label
    or point placed, else where it overlaps fewest; beside its point only where no other point
    is as near. ``clear_pt``: each point's half-width kept clear (``MARKER_HALF_PT``)."""
    scale = ax.figure.dpi / 72.0  # points to pixels
    xs, ys, labels = list(xs), list(ys), list(labels)
    clear_pt = clear_pt if clear_pt is not None else [MARKER_HALF_PT] * len(labels)
    anchors = [tuple(ax.transData.transform((x, y))) for x, y in zip(xs, ys, strict=True)]
    markers = [  # every point's marker: no name is written over another strategy's point
        Bbox.from_extents(px - h * scale, py - h * scale, px + h * scale, py + h * scale)
        for (px, py), h in zip(anchors, clear_pt, strict=True)
    ]
    named: list[tuple[Bbox, MplPath | None]] = []  # each name placed, and its leader line
    frame = ax.bbox
    order = sorted(range(len(labels)), key=lambda i: (anchors[i][0], -anchors[i][1]))
    for i in order:
        anchor, label = anchors[i], labels[i]
        others = [a for j, a in enumerate(anchors) if j != i]
        probe = _annotate(ax, label, (xs[i], ys[i]), OFFSETS[0])
        extent = Text.get_window_extent(probe, renderer)  # the words, not the leader line
        extent = extent.padded(LABEL_GAP_PT * scale / 2)  # a space between neighbours
        probe.remove()
        size = (extent.width, extent.height)
        best: tuple[tuple[int, int], Bbox, MplPath | None] | None = None
        for rank, offset in enumerate(OFFSETS):
            box = _label_box(anchor, size, offset, scale)
            if not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)):
                continue
            if not _leader(offset) and not _told_apart(box, anchor, others, 4 * scale):
                continue  # beside a crowd: another point could be read as its own
            line = _leader_line(box, anchor) if _leader(offset) else None
            clashes = COVERED * sum(box.overlaps(m) for m in markers) + sum(
                _clash(box, line, *other) for other in named
            )
            if best is None or (clashes, rank) < best[0]:
                best = ((clashes, rank), box, line)
            if clashes == 0:
                break
        if best is None:  # no offset fits inside the axes: the first led one
            rank = len(NEAR_OFFSETS)
            box = _label_box(anchor, size, OFFSETS[rank], scale)
            line = _leader_line(box, anchor)
        else:
            (_, rank), box, line = best
        _annotate(ax, label, (xs[i], ys[i]), OFFSETS[rank])
        named.append((box, line))


def _leader_line(box: Bbox, anchor: tuple[float, float]) -> MplPath:
    """The leader line of a label in ``box``: from its point towards the box's centre
    (where matplotlib aims it; the box hides the rest)."""
    return MplPath([anchor, ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)])


def _clash(box: Bbox, line: MplPath | None, other: Bbox, other_line: MplPath | None) -> int:
    """How badly a name (and its leader line) meets another: words over words worst
    (``COVERED``), a line through a name less (1 each way), else 0."""
    crossed = line is not None and line.intersects_bbox(other, filled=False)
    crossing = other_line is not None and other_line.intersects_bbox(box, filled=False)
    return COVERED * box.overlaps(other) + crossed + crossing


POINT_NAME_WIDTH = 30  # characters a line of a point's name


def speed_vs_accuracy(
    problems: list[tuple[str, pd.DataFrame]], picks: dict[str, str] | None = None
) -> Figure | None:
    """Each ok job as a point named by its strategy: time against error (log axes), coloured
    by kind, shaped by dtype, tolerances as lines, the pick starred; a full-width panel per
    problem (their times are not comparable, and names need the room)."""
    picks = picks or {}
    # the newest ok row of each variant that has a time and an error to draw, at their places
    panels = [(t, latest_ok(r).dropna(subset=["err_eps", "time_median_s"])) for t, r in problems]
    panels = [
        (t, r.assign(x_ms=r["time_median_s"] * 1e3, y_err=r["err_eps"].clip(lower=ZERO_ERR)))
        for t, r in panels
        if len(r)
    ]
    if not panels:
        return None
    fig, axes = panel_grid(len(panels), 1, (MAX_WIDTH_IN, 4.8), (0.0, 0.6))
    handles = []
    for ax, (title, ok) in zip(axes, panels, strict=True):
        for (kind, dtype), group in ok.groupby(["strategy_kind", "dtype"]):
            colour = KIND_COLORS.get(str(kind))
            ax.errorbar(
                group["x_ms"],
                group["y_err"],
                xerr=interval_bars(group) * 1e3,
                fmt="none",
                ecolor=colour,
                elinewidth=1.2,
                capsize=3,
                zorder=1.8,
            )
            handles.append(
                ax.scatter(
                    group["x_ms"],
                    group["y_err"],
                    label=f"{kind}, {dtype}",
                    color=colour,
                    marker=DTYPE_MARKERS.get(str(dtype), "D"),
                    alpha=0.8,
                    zorder=2,
                )
            )
        pick = ok[ok["label"] == picks.get(title)]
        if len(pick):
            handles.append(_star(ax, pick["x_ms"], pick["y_err"]))
        handles += _tolerance_lines(ax, ok)
        ax.margins(0.25)  # room for the names at the edges
        _style(ax)
        ax.set_title(textwrap.fill(title, 100), fontsize=FONT)
        log_axis(ax, "x", TIME_LABEL)
        _err_axis(ax, "y", ok, "err_eps")
    figure_legend(fig, handles)
    finish(fig)  # the layout and limits final where the names will be
    renderer = _renderer(fig)
    for ax, (title, ok) in zip(axes, panels, strict=True):
        names = _pick_names(ok["label"], picks.get(title), POINT_NAME_WIDTH)
        clear = [PICK_HALF_PT if lb == picks.get(title) else MARKER_HALF_PT for lb in ok["label"]]
        name_points(ax, ok["x_ms"], ok["y_err"], names, renderer, clear)
    return fig


def _curves_figure(xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    _style(ax)
    log_axis(ax, "x", xlabel)
    log_axis(ax, "y", ylabel)
    return fig, ax


def fd_error_vs_eps(rows: pd.DataFrame) -> Figure | None:
    """rel_err against the step (a V) where an eps sweep is present, with each dtype's tolerance."""
    ok = rows[rows["status"] == Status.OK]
    eps = [parse_options(o).get("eps") for o in ok["strategy_options"]]
    ok = ok.assign(eps=pd.to_numeric(pd.Series(eps, index=ok.index))).dropna(
        subset=["eps", "rel_err"]
    )
    curves = [
        (k, g) for k, g in ok.groupby(["model", "strategy", "dtype"]) if g["eps"].nunique() >= 3
    ]
    if not curves:
        return None
    fig, ax = _curves_figure("eps (relative step)", "rel_err")
    for (model, strategy, dtype), group in curves:
        group = group.sort_values("eps")
        ax.plot(group["eps"], group["rel_err"], marker="o", label=f"{strategy} {dtype} ({model})")
    handles = ax.get_legend_handles_labels()[0]
    drawn = pd.concat(group for _, group in curves).groupby("dtype")
    tolerances = [(str(d), t) for d, g in drawn if (t := _least_tolerance(g)) is not None]
    for i, (dtype, tol) in enumerate(sorted(tolerances)):
        dash = TOLERANCE_STYLES[i % len(TOLERANCE_STYLES)]
        handles.append(_across(ax, tol, dash, f"tolerance {dtype}: {tol:.3g}"))
    ax.legend(handles=handles, fontsize=SMALL)
    return finish(fig)


# Model options that set the shape (N or M): a shape sweep varies them along one curve.
SHAPE_OPTIONS = {
    "n_in",
    "n_out",
    "n",
    "size",
    "shape",
    "input_shape",
    "n_samples",
    "samples",
    "seq_len",
    "batch",
    "name",
}


def family(model_options: str) -> str:
    """A model's family and configuration without its sizes (its class and the options
    that do not set N or M): the points of one crossover curve share it."""
    try:
        options = json.loads(model_options or "{}")
    except (TypeError, ValueError):
        return str(model_options)
    return json.dumps({k: v for k, v in options.items() if k not in SHAPE_OPTIONS}, sort_keys=True)


def _series_names(frame: pd.DataFrame) -> pd.Series:
    """``model dtype``, plus the class and options that tell apart several families
    sharing a model name (two custom models are two curves, never one)."""
    names = frame["model"] + " " + frame["dtype"]
    shared = frame.groupby("model")["family"].transform("nunique") > 1
    detail = frame["family"].map(_family_text)
    return names.where(~shared, frame["model"] + "[" + detail + "] " + frame["dtype"])


def _family_text(text: str) -> str:
    options = json.loads(text)
    target = str(options.pop("_target_", "")).rsplit(".", 1)[-1]
    rest = ",".join(f"{k}={v}" for k, v in sorted(options.items()) if k != "wrt")
    return ",".join(part for part in (target, rest) if part)


def time_vs_shape(problems: list[tuple[str, pd.DataFrame]]) -> Figure | None:
    """Best forward- and reverse-mode time (ms, bar: 95% interval) against N/M, a curve per
    model family and dtype where one shape axis was swept (a family swept over both is a map,
    ``report.heatmaps``: N/M alone would join points of different sizes)."""
    bests = []
    for _, rows in problems:
        exact = standing(rows).dropna(subset=["time_median_s"])  # fastest first
        exact = exact[exact["strategy_kind"] == Kind.EXACT]
        modes = exact[exact["strategy_mode"].isin([Mode.FORWARD, Mode.REVERSE])]
        bests.append(modes.drop_duplicates("strategy_mode"))  # each mode's fastest
    frame = pd.concat(bests, ignore_index=True) if bests else pd.DataFrame()
    if frame.empty:
        return None
    below, above = interval_bars(frame) * 1e3
    frame = frame.assign(
        model=frame["model"].astype(str),
        dtype=frame["dtype"].astype(str),
        family=frame["model_options"].map(family),
        mode=frame["strategy_mode"],
        ratio=frame["n_in"].astype(float) / frame["n_out"].astype(float),
        time=frame["time_median_s"] * 1e3,
        below=below,
        above=above,
    )
    frame["series"] = _series_names(frame)
    series = [
        (n, g)
        for n, g in frame.groupby("series")
        if g["ratio"].nunique() >= 3 and min(g["n_in"].nunique(), g["n_out"].nunique()) == 1
    ]
    if not series:
        return None
    fig, ax = _curves_figure(
        "N / M (inputs per output)", "best median time [ms] (bar: 95% interval)"
    )
    for name, group in series:
        for mode, style in ((Mode.FORWARD, "-o"), (Mode.REVERSE, "--s")):
            line = group[group["mode"] == mode].sort_values("ratio")
            if len(line):
                ax.errorbar(
                    line["ratio"],
                    line["time"],
                    yerr=[line["below"], line["above"]],
                    fmt=style,
                    capsize=3,
                    label=f"{mode} ({name})",
                )
    ax.legend(fontsize=SMALL)
    return finish(fig)


def _spied(rows: pd.DataFrame) -> pd.DataFrame:
    """One stored Jacobian per model whose pattern is sparse: at most ``SPY_MAX_DENSITY``
    nonzero, and coloured in fewer passes than the cheaper dense mode needs."""
    frames = [latest_ok(group) for _, group in by_problem(rows)]  # labels are per problem
    if not frames:
        return rows.iloc[:0]
    ok = pd.concat(frames)
    has_jacobian = ok["jacobian"].map(lambda j: isinstance(j, (list, np.ndarray)) and len(j) > 0)
    density = pd.to_numeric(ok["pattern_density"], errors="coerce")
    colours = pd.to_numeric(ok["n_colors"], errors="coerce")
    dense_passes = np.minimum(ok["n_in"].astype(float), ok["n_out"].astype(float))
    sparse = (density <= SPY_MAX_DENSITY) & (colours < dense_passes)
    return ok[has_jacobian & sparse.fillna(False)].sort_values("n_colors").drop_duplicates("model")


SPY_PANEL_IN = 3.6  # inches a panel: three to a row fill the page


def sparsity_pattern(rows: pd.DataFrame) -> Figure | None:
    """Spy plot of one stored Jacobian per model where a sparse strategy ran on a sparse
    pattern (a dense one is a black rectangle), titled with its colour count and density."""
    first = _spied(rows)
    if first.empty:
        return None
    fig, axes = panel_grid(len(first), 3, (SPY_PANEL_IN, SPY_PANEL_IN + 0.6), (0.4, 0.0))
    for ax, (_, r) in zip(axes, first.iterrows(), strict=True):
        jac = np.asarray(r["jacobian"], dtype=float).reshape(-1, int(r["n_out"]), int(r["n_in"]))
        ax.spy(jac[0], aspect="auto")  # an image of the nonzeros
        _style(ax)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        ax.set_xlabel("input (N)", fontsize=FONT)
        ax.set_ylabel("output (M)", fontsize=FONT)
        title = f"{r['model']}: {int(r['n_colors'])} colours ({r['strategy']})"
        ax.set_title(
            f"{textwrap.fill(title, 36)}\n"
            f"density {float(r['pattern_density']):.0%}, {jac.shape[1]} x {jac.shape[2]}",
            fontsize=FONT,
        )
    return finish(fig)


def settled_pick(rec) -> str:
    """The recommended strategy, where the report names one (not where it says "no settled
    winner": a star there would contradict the text)."""
    return "" if rec.best is None or rec.unsettled else rec.best


def timed_problems(
    problems: list[tuple[str, pd.DataFrame]],
) -> list[tuple[str, pd.DataFrame]]:
    """Each problem's timed rows, for the problems that have any: a job that failed on bad
    input (no shape, no time) is a problem of its own in the tables, never a panel."""
    timed = [(t, g.dropna(subset=["time_median_s"])) for t, g in problems]
    return [(t, g) for t, g in timed if len(g)]


def all_plots(rows: pd.DataFrame, problems: list[tuple[str, pd.DataFrame]]) -> dict[str, Figure]:
    picks = {title: settled_pick(recommend(title, group)) for title, group in problems}
    # untimed rows (timing=none) have no time to draw; a panel per problem only up to
    # MAX_PROBLEM_PANELS (more would make a figure too tall: heat maps and tables cover them)
    every = timed_problems(problems)
    timed = every if len(every) <= MAX_PROBLEM_PANELS else []
    figures = {
        "time_per_strategy": time_per_strategy(timed, picks),
        "accuracy_per_strategy": accuracy_per_strategy(rows),
        "speed_vs_accuracy": speed_vs_accuracy(timed, picks),
        "fd_error_vs_eps": fd_error_vs_eps(rows),
        "time_vs_shape": time_vs_shape(every),
        "sparsity_pattern": sparsity_pattern(rows),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}
