"""Headless matplotlib figures of a result set. Each function returns a Figure, or None when
the rows hold no data for it (no eps sweep, no shape sweep)."""

from __future__ import annotations

import json
import math
import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from jacbench.core.enums import Kind, Mode, Status
from jacbench.report.analysis import recommend  # noqa: E402
from jacbench.report.problems import good, latest_ok  # noqa: E402

ZERO_ERR = 1e-2  # err_eps of exactly 0 drawn here on a log axis
KIND_COLORS = {
    Kind.EXACT: "tab:blue",
    Kind.APPROXIMATE: "tab:orange",
    Kind.NEGATIVE_CONTROL: "tab:red",
}


def _loglog(fig: Figure, ax, xlabel: str, ylabel: str, **legend) -> Figure:
    """Log-log axes with labels and a legend: the common finish of the scatter plots."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(**legend)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    return fig


KIND_MARKERS = {Kind.EXACT: "o", Kind.APPROXIMATE: "D", Kind.NEGATIVE_CONTROL: "x"}
# machine epsilon per dtype name: the err_eps unit, for the tolerance lines (no torch here)
DTYPE_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def _interval_bars(rows: pd.DataFrame) -> np.ndarray:
    """Left and right bar lengths: the 95% interval of the median (``jacbench.timing.rule``);
    zero for rows without one (drawn hollow)."""
    median = rows["time_median_s"].astype(float)
    low = pd.to_numeric(rows.get("time_ci_low_s"), errors="coerce").fillna(median)
    high = pd.to_numeric(rows.get("time_ci_high_s"), errors="coerce").fillna(median)
    return np.vstack([(median - low).clip(lower=0), (high - median).clip(lower=0)])


def time_per_strategy(
    problems: list[tuple[str, pd.DataFrame]], picks: dict[str, str] | None = None
) -> Figure | None:
    """Median time of every ok strategy, per problem; bars span the 95% confidence interval
    of the median, colour and marker tell exact from approximate, and the recommended
    strategy (``picks``: problem title -> label) is starred. One panel per problem, each as
    tall as its number of strategies needs, the figure widened for long strategy names."""
    picks = picks or {}
    panels = [(t, latest_ok(r).sort_values("time_median_s")) for t, r in problems]
    panels = [(t, r) for t, r in panels if len(r)]
    if not panels:
        return None
    heights = [0.3 * len(r) + 1.2 for _, r in panels]
    longest = max(len(label) for _, r in panels for label in r["label"])
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(max(8.0, 6 + 0.07 * longest), sum(heights)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    for ax, (title, rows) in zip(axes[:, 0], panels, strict=True):
        rows = rows.reset_index(drop=True)
        bars = _interval_bars(rows)
        for kind, group in rows.groupby("strategy_kind"):
            index = group.index
            ax.errorbar(
                group["time_median_s"],
                index,
                xerr=bars[:, index],
                fmt=KIND_MARKERS.get(kind, "o"),
                color=KIND_COLORS.get(kind, "0.3"),
                capsize=3,
                label=f"{kind} (bar: 95% interval of the median)",
            )
        pick = rows.index[rows["label"] == picks.get(title)]
        if len(pick):
            ax.scatter(
                rows.loc[pick, "time_median_s"],
                pick,
                marker="*",
                s=160,
                color="gold",
                edgecolors="black",
                zorder=3,
                label="recommended",
            )
        names = [label + (" (pick)" if i in pick else "") for i, label in enumerate(rows["label"])]
        ax.set_yticks(range(len(rows)), names, fontsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_xscale("log")
        ax.set_title(textwrap.fill(title, 80), fontsize=9)
        ax.set_xlabel("seconds per Jacobian", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
    return fig


def accuracy_per_strategy(rows: pd.DataFrame) -> Figure | None:
    """err_eps (rounding units) per strategy, one series per dtype, with each dtype's
    tolerance as a line (dashed: exact; dotted: approximate)."""
    ok = rows[(rows["status"] == Status.OK) & rows["err_eps"].notna()]
    if ok.empty:
        return None
    labels = sorted(ok["label"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) + 2), 5), layout="constrained")
    for dtype, group in ok.groupby("dtype"):
        x = [labels.index(label) for label in group["label"]]
        ax.scatter(x, group["err_eps"].clip(lower=ZERO_ERR), label=str(dtype), alpha=0.7)
        eps = DTYPE_EPS.get(str(dtype))
        for kind, style in ((Kind.EXACT, "--"), (Kind.APPROXIMATE, ":")):
            tol = pd.to_numeric(group[group["strategy_kind"] == kind]["tolerance"])
            if eps and tol.notna().any():
                ax.axhline(float(tol.min()) / eps, ls=style, lw=0.8, color="0.4")
                ax.annotate(
                    f"{dtype} {kind} tolerance",
                    (0, float(tol.min()) / eps),
                    fontsize=7,
                    xytext=(2, 2),
                    textcoords="offset points",
                    color="0.3",
                )
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel(f"err_eps (rel_err / machine eps)\n0 drawn at {ZERO_ERR:g}")
    ax.legend(title="dtype")
    return fig


DTYPE_MARKERS = {"float64": "s", "float32": "o", "float16": "^", "bfloat16": "v"}


def _offsets() -> list[tuple[int, int]]:
    """Label offsets (points) tried in turn: beside the point first, then further above and
    below (with a leader line), right before left."""
    near = [(5, 3), (5, -9), (-5, 3), (-5, -9)]
    far = [(dx, sign * dy) for dy in range(16, 90, 12) for sign in (1, -1) for dx in (8, -8)]
    return near + far


OFFSETS = _offsets()


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
        fontsize=7,
        ha="left" if dx > 0 else "right",
        va="center",
        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"} if abs(dy) > 12 else None,
    )


def name_points(ax, xs, ys, labels, renderer) -> None:
    """Write each point's label beside it, at the first offset where it overlaps no label
    or point already placed; far ones get a leader line (a crowded cluster keeps its last
    try rather than dropping a name). The figure must have been laid out (drawn) with its
    limits final. Each label is measured once and its box at every offset computed from
    that (a trial label per offset, and a draw per panel, took seconds per report)."""
    scale = ax.figure.dpi / 72.0  # points to pixels
    placed = []
    for x, y, label in sorted(zip(xs, ys, labels, strict=True), key=lambda p: (p[0], -p[1])):
        probe = _annotate(ax, label, (x, y), OFFSETS[0])
        extent = Text.get_window_extent(probe, renderer)  # the words, not the leader line
        probe.remove()
        anchor = tuple(ax.transData.transform((x, y)))
        for offset in OFFSETS:
            box = _label_box(anchor, (extent.width, extent.height), offset, scale)
            inside = ax.bbox.contains(box.x0, box.y0) and ax.bbox.contains(box.x1, box.y1)
            if (inside and not any(box.overlaps(other) for other in placed)) or (
                offset == OFFSETS[-1]
            ):
                break
        _annotate(ax, label, (x, y), offset)
        placed.append(box)


def speed_vs_accuracy(problems: list[tuple[str, pd.DataFrame]]) -> Figure | None:
    """Each ok job as a point named by its strategy: time against error, coloured by kind,
    shaped by dtype; one panel per problem (their times are not comparable)."""
    panels = [(t, _timed_ok(r)) for t, r in problems]
    panels = [(t, r) for t, r in panels if len(r)]
    if not panels:
        return None
    ncols = 1 if len(panels) == 1 else 2
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(8 * ncols, 6 * nrows), squeeze=False, layout="constrained"
    )
    for ax, (title, ok) in zip(axes.flat, panels, strict=False):
        for (kind, dtype), group in ok.groupby(["strategy_kind", "dtype"]):
            ax.scatter(
                group["time_median_s"],
                group["err_eps"].clip(lower=ZERO_ERR),
                label=f"{kind}, {dtype}",
                color=KIND_COLORS.get(str(kind)),
                marker=DTYPE_MARKERS.get(str(dtype), "D"),
                alpha=0.7,
            )
        ax.margins(0.25)  # room for the names at the edges
        ax.set_title(textwrap.fill(title, 70), fontsize=9)
        _loglog(fig, ax, "median seconds per Jacobian", "err_eps", title="kind, dtype", fontsize=8)
    for ax in axes.flat[len(panels) :]:
        ax.remove()  # an empty cell of the grid
    fig.draw_without_rendering()  # settle the layout and limits where the names will be
    renderer = fig.canvas.get_renderer()
    for ax, (_, ok) in zip(axes.flat, panels, strict=False):
        errors = ok["err_eps"].clip(lower=ZERO_ERR)
        name_points(ax, ok["time_median_s"], errors, ok["label"], renderer)
    fig.set_layout_engine("none")  # laid out above, names inside the axes: saving redoes none
    return fig


def _timed_ok(rows: pd.DataFrame) -> pd.DataFrame:
    """The newest ok row of each variant that has a time and an error to draw."""
    ok = latest_ok(rows)
    return ok[ok["err_eps"].notna() & ok["time_median_s"].notna()]


def _eps(options: str) -> float | None:
    try:
        value = json.loads(options or "{}").get("eps")
    except (TypeError, ValueError):
        return None
    return float(value) if value is not None else None


def fd_error_vs_eps(rows: pd.DataFrame) -> Figure | None:
    """The V-shaped curve: rel_err against the step, where an eps sweep is present."""
    ok = rows[rows["status"] == Status.OK].assign(
        eps=[_eps(o) for o in rows.loc[rows["status"] == Status.OK, "strategy_options"]]
    )
    ok = ok.dropna(subset=["eps", "rel_err"])
    curves = [
        (k, g) for k, g in ok.groupby(["model", "strategy", "dtype"]) if g["eps"].nunique() >= 3
    ]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for (model, strategy, dtype), group in curves:
        group = group.sort_values("eps")
        ax.plot(group["eps"], group["rel_err"], marker="o", label=f"{strategy} {dtype} ({model})")
    return _loglog(fig, ax, "eps (relative step)", "rel_err", fontsize=8)


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
    """Best forward-mode and reverse-mode time against N/M, where shapes were swept: one
    curve per model family and dtype."""
    points = []
    for _, rows in problems:
        exact = good(rows)
        exact = exact[exact["strategy_kind"] == Kind.EXACT]
        for mode, group in exact.groupby("strategy_mode"):
            if mode in (Mode.FORWARD, Mode.REVERSE):
                first = group.iloc[0]
                points.append(
                    {
                        "model": str(first["model"]),
                        "dtype": str(first["dtype"]),
                        "family": family(first["model_options"]),
                        "mode": mode,
                        "ratio": float(first["n_in"]) / float(first["n_out"]),
                        "time": float(group["time_median_s"].min()),
                    }
                )
    frame = pd.DataFrame(points)
    if frame.empty:
        return None
    frame["series"] = _series_names(frame)
    series = [(n, g) for n, g in frame.groupby("series") if g["ratio"].nunique() >= 3]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, group in series:
        for mode, style in ((Mode.FORWARD, "-o"), (Mode.REVERSE, "--s")):
            line = group[group["mode"] == mode].sort_values("ratio")
            if len(line):
                ax.plot(line["ratio"], line["time"], style, label=f"{mode} ({name})")
    return _loglog(fig, ax, "N / M (inputs per output)", "best median seconds", fontsize=8)


def sparsity_pattern(rows: pd.DataFrame) -> Figure | None:
    """Spy plot of one stored Jacobian per model where a sparse strategy ran, titled with
    its colour count and density (only Jacobians small enough to be stored)."""
    ok = latest_ok(rows)
    has_jacobian = ok["jacobian"].map(lambda j: isinstance(j, (list, np.ndarray)) and len(j) > 0)
    stored = ok[ok["n_colors"].notna() & has_jacobian]
    if stored.empty:
        return None
    first = stored.sort_values("n_colors").drop_duplicates("model")
    fig, axes = plt.subplots(1, len(first), figsize=(4 * len(first), 4.4), squeeze=False)
    for ax, (_, r) in zip(axes[0], first.iterrows(), strict=True):
        jac = np.asarray(r["jacobian"], dtype=float).reshape(-1, int(r["n_out"]), int(r["n_in"]))
        ax.spy(jac[0])  # an image of the nonzeros
        ax.set_title(
            f"{r['model']}: {int(r['n_colors'])} colours ({r['strategy']})\n"
            f"density {float(r['pattern_density']):.2%}, {jac.shape[1]} x {jac.shape[2]}",
            fontsize=9,
        )
    fig.tight_layout()
    return fig


def all_plots(rows: pd.DataFrame, problems: list[tuple[str, pd.DataFrame]]) -> dict[str, Figure]:
    picks = {title: recommend(title, group).best or "" for title, group in problems}
    figures = {
        "time_per_strategy": time_per_strategy(problems, picks),
        "accuracy_per_strategy": accuracy_per_strategy(rows),
        "speed_vs_accuracy": speed_vs_accuracy(problems),
        "fd_error_vs_eps": fd_error_vs_eps(rows),
        "time_vs_shape": time_vs_shape(problems),
        "sparsity_pattern": sparsity_pattern(rows),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}
