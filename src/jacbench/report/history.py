"""``python -m jacbench.report --history DIR1 DIR2 ...``: each strategy's time across result
folders (torch or jacbench versions, machines) in the order given, changes judged by the rule."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from jacbench.record.parquet import read_results
from jacbench.report.display import time_text
from jacbench.report.plots import (
    DPI,
    FONT,
    MAX_WIDTH_IN,
    SMALL,
    display_width,
    figure_legend,
    finish,
    interval_bars,
    log_axis,
    panel_grid,
)
from jacbench.report.problems import latest_ok, normalise, problems
from jacbench.report.render import Document
from jacbench.report.screen import screen
from jacbench.timing.rule import Order, verdict

# what tells one measured version from another, where the rows record it
VERSION_COLUMNS = ("jacbench_version", "torch_version", "machine", "device_name")
MAX_PANELS = 12
RING = "settled change from the previous version (the rule)"


@dataclass(frozen=True)
class Version:
    """One folder of the history: its position, its path and what its rows say it ran."""

    position: int
    folder: Path
    label: str


def _label(position: int, folder: Path, rows: pd.DataFrame) -> str:
    parts = [f"{position + 1}: {folder.name or folder}"]
    for column in VERSION_COLUMNS:
        if column in rows and rows[column].notna().any():
            values = sorted({str(v) for v in rows[column].dropna() if str(v)})
            if values:
                name = column.replace("_version", "").replace("_name", "")
                parts.append(f"{name} {', '.join(values)}")
    return ", ".join(parts)


def read_history(folders: list[Path]) -> tuple[list[Version], pd.DataFrame]:
    """The versions (one per folder) and all their usable rows, each with its ``version``."""
    versions, frames = [], []
    for position, folder in enumerate(folders):
        rows = screen(read_results(folder))
        versions.append(Version(position, folder, _label(position, folder, rows)))
        if len(rows):
            frames.append(rows.assign(version=position))
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return versions, normalise(rows)[0] if len(rows) else rows


@dataclass(frozen=True)
class Change:
    """A strategy's time on one problem between two neighbouring versions, by the rule."""

    problem: str
    label: str
    before: int
    after: int
    order: Order
    ratio: float
    text: str

    @property
    def settled(self) -> bool:
        return self.order in (Order.FASTER, Order.SLOWER)

    @property
    def word(self) -> str:
        return {Order.FASTER: "faster", Order.SLOWER: "slower"}.get(self.order, "not settled")

    def line(self, versions: list[Version]) -> str:
        ratio = f"{self.ratio:.3g}x" if self.settled else "no ratio"
        return (
            f"{self.problem}: {self.label} {versions[self.before].label} -> "
            f"{versions[self.after].label}: {self.word} ({ratio}; {self.text})"
        )


def changes(rows: pd.DataFrame) -> list[Change]:
    """Each strategy variant's change between neighbouring versions, per problem."""
    found: list[Change] = []
    if rows.empty:
        return found
    for title, group in problems(rows):
        by_version = {v: latest_ok(g).set_index("label") for v, g in group.groupby("version")}
        ordered = sorted(by_version)
        for before, after in zip(ordered, ordered[1:], strict=False):
            shared = by_version[before].index.intersection(by_version[after].index)
            for label in shared:
                old, new = by_version[before].loc[label], by_version[after].loc[label]
                if pd.isna(old["time_median_s"]) or pd.isna(new["time_median_s"]):
                    continue
                # FASTER: the later version is faster; the rule's sentence names the versions
                later = {**new, "label": f"version {after + 1}"}
                result = verdict(later, {**old, "label": f"version {before + 1}"})
                ratio = float(new["time_median_s"]) / float(old["time_median_s"])
                change = Change(title, str(label), before, after, result.order, ratio, result.text)
                found.append(change)
    return found


STYLE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def strategy_styles(labels: list[str]) -> dict[str, dict[str, str]]:
    """One style per strategy variant, the same in every panel (the figure has one legend):
    ten colours, then each again with another marker and line style."""
    return {
        label: {
            "color": f"C{i % 10}",
            "marker": STYLE_MARKERS[i // 10 % len(STYLE_MARKERS)],
            "linestyle": ("-", "--", ":", "-.")[i // 10 % 4],
        }
        for i, label in enumerate(labels)
    }


def history_figure(
    rows: pd.DataFrame, versions: list[Version], settled: list[Change]
) -> Figure | None:
    """Each strategy's median time (bar: 95% interval) per version, a panel per problem (up to
    MAX_PANELS); a ring marks a point whose change from the previous version the rule settles."""
    groups = problems(rows)[:MAX_PANELS] if len(rows) else []
    groups = [(t, g) for t, g in groups if g["version"].nunique() >= 2]
    if not groups:
        return None
    fig, axes = panel_grid(len(groups), 2, (MAX_WIDTH_IN, 3.4), (0.0, 1.2))
    handles = {}
    styles = strategy_styles(sorted({str(lb) for _, g in groups for lb in g["label"]}))
    for ax, (title, group) in zip(axes, groups, strict=True):
        newest = pd.concat(latest_ok(g) for _, g in group.groupby("version"))
        timed = newest.dropna(subset=["time_median_s"]).sort_values("version")
        for label, points in timed.groupby("label", sort=True):
            handles[str(label)] = ax.errorbar(
                points["version"] + 1,
                points["time_median_s"] * 1e3,
                yerr=interval_bars(points) * 1e3,
                capsize=3,
                label=str(label),
                **styles[str(label)],
            )
            rings = [c.after for c in settled if c.problem == title and c.label == label]
            ringed = points[points["version"].isin(rings)]
            if len(ringed):
                handles[RING] = ax.scatter(
                    ringed["version"] + 1,
                    ringed["time_median_s"] * 1e3,
                    s=220,
                    facecolors="none",
                    edgecolors="red",
                    linewidths=1.6,
                    label=RING,
                    zorder=3,
                )
        ax.set_xticks([v.position + 1 for v in versions])
        ax.set_xlim(0.5, len(versions) + 0.5)
        log_axis(ax, "y", "median time [ms] (bar: 95% interval)")
        ax.set_xlabel("version (the folders in the order given)", fontsize=FONT)
        ax.set_title(title, fontsize=FONT)
        ax.tick_params(labelsize=SMALL)
    ring = [handles.pop(RING)] if RING in handles else []  # after the strategies
    figure_legend(fig, [*handles.values(), *ring], ncols=4)
    return finish(fig)


def number_lines(
    rows: pd.DataFrame, versions: list[Version], found: list[Change]
) -> tuple[list[str], list[list[str]]]:
    """The figure's numbers: a line per problem and strategy, its median time and interval in
    each version ("-" where not measured), and its last change by the rule."""
    header = ["problem", "strategy", *(f"version {v.position + 1}" for v in versions), "change"]
    lines: list[list[str]] = []
    if rows.empty:
        return header, lines
    last = {(c.problem, c.label): c for c in found}  # in order: the latest change is kept
    for title, group in problems(rows):
        by_version = {v: latest_ok(g).set_index("label") for v, g in group.groupby("version")}
        labels = sorted({str(lb) for frame in by_version.values() for lb in frame.index})
        for label in labels:
            cells = [
                time_text(by_version[v.position].loc[label])
                if v.position in by_version and label in by_version[v.position].index
                else "-"
                for v in versions
            ]
            word = ""
            if (change := last.get((title, label))) is not None:
                ratio = f" {change.ratio:.3g}x" if change.settled else ""
                word = f"{change.before + 1} -> {change.after + 1}: {change.word}{ratio}"
            lines.append([title, label, *cells, word])
    return header, lines


def history_report(folders: list[Path], out: Path) -> tuple[Path, list[str]]:
    """history.md, history.html and history.png in ``out``; returns the markdown's path and
    the lines to print (the versions, then every settled change)."""
    versions, rows = read_history(folders)
    found = changes(rows)
    settled = [c for c in found if c.settled]
    out.mkdir(parents=True, exist_ok=True)
    doc = Document("jacbench history")
    head = (
        f"{len(found)} strategy-problem changes between {len(versions)} versions: "
        f"{sum(c.order == Order.SLOWER for c in found)} settled slower, "
        f"{sum(c.order == Order.FASTER for c in found)} settled faster, "
        f"{len(found) - len(settled)} not settled (docs/columns.md)."
    )
    doc.paragraph(f"**{head}**")
    doc.heading("Versions")
    doc.bullets([v.label for v in versions])
    doc.heading("Settled changes")
    doc.bullets([c.line(versions) for c in settled] or ["none"])
    fig = history_figure(rows, versions, settled)
    if fig is not None:
        path = out / "history.png"
        fig.savefig(path, dpi=DPI)
        doc.image(
            path,
            "Median time per version (bar: 95% interval of the median), one panel per problem",
            display_width(fig),
        )
        plt.close(fig)
    header, lines = number_lines(rows, versions, found)
    if lines:
        doc.heading("Numbers")
        doc.paragraph(
            "The figure's points: median time per Jacobian [95% interval of the median] in "
            "each version, and each strategy's last change by the rule."
        )
        doc.table(header, lines)
    md, _ = doc.write(out, "history")
    return md, [head, *(v.label for v in versions), *(c.line(versions) for c in settled)]
