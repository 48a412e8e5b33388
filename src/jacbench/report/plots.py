"""Headless matplotlib figures of a result set. Each function returns a Figure, or None when
the rows hold no data for it (no eps sweep, no shape sweep)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from jacbench.enums import Kind, Mode, Status
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
    fig.tight_layout()
    return fig


def time_per_strategy(problems: list[tuple[str, pd.DataFrame]]) -> Figure | None:
    """Median time of every ok strategy, per problem; bars span the IQR."""
    panels = [(t, latest_ok(r).sort_values("time_median_s")) for t, r in problems]
    panels = [(t, r) for t, r in panels if len(r)]
    if not panels:
        return None
    height = sum(0.3 * len(r) + 0.9 for _, r in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, max(2.5, height)), squeeze=False)
    for ax, (title, rows) in zip(axes[:, 0], panels, strict=True):
        ax.errorbar(
            rows["time_median_s"],
            range(len(rows)),
            xerr=rows["time_iqr_s"].fillna(0) / 2,
            fmt="o",
            capsize=3,
            label="median (bar: IQR)",
        )
        ax.set_yticks(range(len(rows)), rows["label"])
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds per Jacobian")
    fig.tight_layout()
    return fig


def accuracy_per_strategy(rows: pd.DataFrame) -> Figure | None:
    """err_eps (rounding units) per strategy, one series per dtype."""
    ok = rows[(rows["status"] == Status.OK) & rows["err_eps"].notna()]
    if ok.empty:
        return None
    labels = sorted(ok["label"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) + 2), 4))
    for dtype, group in ok.groupby("dtype"):
        x = [labels.index(label) for label in group["label"]]
        ax.scatter(x, group["err_eps"].clip(lower=ZERO_ERR), label=str(dtype), alpha=0.7)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel(f"err_eps (rel_err / machine eps; 0 drawn at {ZERO_ERR:g})")
    ax.legend(title="dtype")
    fig.tight_layout()
    return fig


def speed_vs_accuracy(rows: pd.DataFrame) -> Figure | None:
    """Each ok job as a point: time against error, coloured by kind."""
    ok = rows[
        (rows["status"] == Status.OK) & rows["err_eps"].notna() & rows["time_median_s"].notna()
    ]
    if ok.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for kind, group in ok.groupby("strategy_kind"):
        ax.scatter(
            group["time_median_s"],
            group["err_eps"].clip(lower=ZERO_ERR),
            label=str(kind),
            color=KIND_COLORS.get(str(kind)),
            alpha=0.7,
        )
    return _loglog(fig, ax, "median seconds per Jacobian", "err_eps", title="kind")


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


def time_vs_shape(problems: list[tuple[str, pd.DataFrame]]) -> Figure | None:
    """Best forward-mode and reverse-mode time against N/M, where shapes were swept."""
    points = []
    for _, rows in problems:
        exact = good(rows)
        exact = exact[exact["strategy_kind"] == Kind.EXACT]
        for mode, group in exact.groupby("strategy_mode"):
            if mode in (Mode.FORWARD, Mode.REVERSE):
                first = group.iloc[0]
                points.append(
                    {
                        "series": f"{first['model']} {first['dtype']}",
                        "mode": mode,
                        "ratio": float(first["n_in"]) / float(first["n_out"]),
                        "time": float(group["time_median_s"].min()),
                    }
                )
    frame = pd.DataFrame(points)
    if frame.empty:
        return None
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
    figures = {
        "time_per_strategy": time_per_strategy(problems),
        "accuracy_per_strategy": accuracy_per_strategy(rows),
        "speed_vs_accuracy": speed_vs_accuracy(rows),
        "fd_error_vs_eps": fd_error_vs_eps(rows),
        "time_vs_shape": time_vs_shape(problems),
        "sparsity_pattern": sparsity_pattern(rows),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}
