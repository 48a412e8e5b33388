"""The map's heat maps of ``jacbench.report.grid``'s cells (settled winner, best forward over
best reverse, auto's regret): a panel per model, dtype and device; texts stay in their cell."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from jacbench.report.grid import REGRET_BOUND, Cell, axis_name, by_family
from jacbench.report.plots import FONT, SMALL, figure_legend, finish, panel_grid

if TYPE_CHECKING:
    from matplotlib.typing import ColorType

PANEL_IN = (4.6, 3.9)  # one family's panel, with its colour bar or labels
COLUMNS = 2  # panels side by side: two at 9.2 in fit the report's width
# Short names drawn inside cells (a cell is ~0.7 in wide), where the first letters of the
# name's words (``short``) would not tell them apart; the legend spells them out
SHORT = {
    "jacrev": "JR",
    "jacfwd": "JF",
    "jacrev_compiled": "JRc",
    "jacfwd_compiled": "JFc",
    "jacfwd_folded": "JFf",
    "sparse_jacfwd": "SF",
    "sparse_jacrev": "SR",
    "sparse_fd": "SD",
    "fd_forward": "D",
    "fd_forward_loop": "DL",
    "fd_central": "DC",
    "analytic": "AN",
}
TIE_COLOR = "0.85"
UNSETTLED_HATCH = "//"  # over every cell whose order the rule does not settle, with its reason
LEGEND_ENTRY_IN = 2.3  # width of one legend entry ("JFf = jacfwd_folded")
EMPTY_COLOR = "white"


def short(label: str) -> str:
    """A strategy's code in a cell; an unknown one by the first letters of its words."""
    base = label.split("[")[0]
    return SHORT.get(base) or "".join(w[:1].upper() for w in base.split("_")) or "?"


def _panels(cells: list[Cell]) -> tuple[Figure, list]:
    """A figure of one panel per family: (axes, family, its cells) each."""
    families = by_family(cells)
    fig, axs = panel_grid(len(families), COLUMNS, PANEL_IN, (0.0, 0.9))
    return fig, [(ax, *family) for ax, family in zip(axs, families.items(), strict=True)]


def _frame(ax, family: str, found: list[Cell], axes: tuple[str, str]) -> tuple[list, list]:
    """A family's panel: its cells' axis values as ticks, its title, the M = N line; returns
    the axis values (a cell's column and row are their indices)."""
    xs, ys = sorted({c.x for c in found}), sorted({c.y for c in found})
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylim(-0.5, len(ys) - 0.5)
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs], fontsize=FONT)
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys], fontsize=FONT)
    ax.set_xlabel(axis_name(axes[0]), fontsize=FONT)
    ax.set_ylabel(axis_name(axes[1]), fontsize=FONT)
    ax.set_title(textwrap.fill(family, 40), fontsize=FONT)
    ax.set_aspect("auto")
    # M = N: through the cells where both axes hold one value, over patches, under texts
    points = [(xs.index(v), ys.index(v)) for v in xs if v in ys]
    if len(points) >= 2:
        (x0, y0), (x1, y1) = points[0], points[-1]
        line = [x0 - 0.5, x1 + 0.5], [y0 - 0.5, y1 + 0.5]
        ax.plot(*line, color="black", lw=1.2, ls="--", zorder=2.5)
    return xs, ys


def _patch(ax, i: int, j: int, **style) -> None:
    """A patch over the whole cell at column ``i``, row ``j``."""
    ax.add_patch(Rectangle((i - 0.5, j - 0.5), 1, 1, **style))


def _framed_entry(label: str) -> Patch:
    return Patch(fc="white", ec="black", lw=2, label=label)


def _diagonal_entry() -> Line2D:
    return Line2D([], [], color="black", lw=1.2, ls="--", label="M = N")


def _text(ax, i: int, j: int, text: str, fill: ColorType = "white", **style) -> None:
    """``text`` at the cell's centre on a patch of ``fill`` (the cell's colour: the M = N
    line passes under it), black or white, whichever reads on ``fill``."""
    r, g, b, _ = colors.to_rgba(fill)
    dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
    ax.text(
        i,
        j,
        text,
        ha="center",
        va="center",
        fontsize=SMALL,
        color="white" if dark else "black",
        bbox={"boxstyle": "round,pad=0.15", "fc": fill, "lw": 0},
        zorder=3,
        **style,
    )


def winners(axes: tuple[str, str], cells: list[Cell]) -> Figure | None:
    """The settled winner per cell, a colour per strategy; ties hatched, labelled with both."""
    names = sorted({c.winner for c in cells if c.winner} | {t for c in cells for t in c.tied})
    if not names:
        return None
    palette = plt.get_cmap("tab20")  # 20 listed colours: colour i is palette(i)
    colour = {name: palette(i % palette.N) for i, name in enumerate(names)}
    fig, panels = _panels(cells)
    fill: ColorType  # a strategy's listed colour (RGBA), or a named one
    for ax, family, found in panels:
        xs, ys = _frame(ax, family, found, axes)
        for c in found:
            i, j = xs.index(c.x), ys.index(c.y)
            if c.winner:
                fill, hatch, label = colour[c.winner], None, short(c.winner)
            elif c.tied:
                fill, hatch = TIE_COLOR, UNSETTLED_HATCH
                label = "/".join(short(t) for t in c.tied) + f"\n{c.winner_why or 'tied'}"
            else:
                fill, hatch, label = EMPTY_COLOR, None, "-"
            _patch(ax, i, j, facecolor=fill, hatch=hatch, ec="white")
            _text(ax, i, j, label)
    handles: list[Artist] = [Patch(facecolor=colour[n], label=f"{short(n)} = {n}") for n in names]
    handles.append(_unsettled_entry("no settled winner"))
    handles.append(_diagonal_entry())
    figure_legend(fig, handles, ncols=max(1, int(fig.get_figwidth() / LEGEND_ENTRY_IN)))
    return finish(fig)


def _unsettled_entry(what: str) -> Patch:
    return Patch(
        facecolor=TIE_COLOR,
        hatch=UNSETTLED_HATCH,
        label=f"hatched: {what} (why: tied, waited = timed while waiting for a core, no interval)",
    )


def _colour_panels(
    axes: tuple[str, str],
    cells: list[Cell],
    value,
    norm: colors.Normalize,
    cmap: str,
    label: str,
    mark,
    text,
    why,
    withheld,
    legend: list[Artist],
) -> Figure:
    """One colour panel per family, and the figure's ``legend``. ``why(c)``: why the cell's
    order is not settled ("" if it is): such a cell is hatched; ``withheld(c)``: its value is
    not shown as a result at all (greyed, hatched, the reason in its place)."""
    fig, panels = _panels(cells)
    mapper = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    for ax, family, found in panels:
        xs, ys = _frame(ax, family, found, axes)
        grid = np.full((len(ys), len(xs)), np.nan)
        for c in found:
            shown = value(c) is not None and not withheld(c)
            grid[ys.index(c.y), xs.index(c.x)] = value(c) if shown else np.nan
        ax.imshow(grid, origin="lower", cmap=cmap, norm=norm, aspect="auto")
        for c in found:
            i, j = xs.index(c.x), ys.index(c.y)
            v = value(c)
            if v is None:
                _text(ax, i, j, "-")
                continue
            if why(c):
                face = TIE_COLOR if withheld(c) else "none"
                _patch(ax, i, j, facecolor=face, hatch=UNSETTLED_HATCH, ec="0.45", lw=0, zorder=2)
            if withheld(c):
                _text(ax, i, j, why(c), fill=TIE_COLOR)
                continue
            weight = "bold" if mark(c) else "normal"
            r, g, b, a = mapper.to_rgba(v)  # one value's colour: four floats
            _text(ax, i, j, text(c), fill=(r, g, b, a), fontweight=weight)
            if mark(c):
                ax.add_patch(Rectangle((i - 0.45, j - 0.45), 0.9, 0.9, fill=False, lw=2, ec="k"))
        bar = fig.colorbar(mapper, ax=ax, shrink=0.9)
        bar.set_label(label, fontsize=SMALL)
        bar.ax.tick_params(labelsize=SMALL)
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        bar.ax.yaxis.set_minor_formatter(NullFormatter())
    figure_legend(fig, [*legend, _diagonal_entry()])
    return finish(fig)


def forward_over_reverse(axes: tuple[str, str], cells: list[Cell]) -> Figure | None:
    """Best forward-mode time over best reverse-mode time (exact strategies): blue where
    forward wins, red where reverse does; a framed, bold ratio is settled by the rule."""
    found = [c for c in cells if c.forward_over_reverse is not None]
    if not found:
        return None
    ratios = [c.forward_over_reverse for c in found if c.forward_over_reverse]
    span = max(2.0, *(max(r, 1 / r) for r in ratios))
    norm = colors.LogNorm(vmin=1 / span, vmax=span)
    return _colour_panels(
        axes,
        cells,
        lambda c: c.forward_over_reverse,
        norm,
        "RdBu_r",
        "best forward / best reverse (time)",
        lambda c: c.modes_settled,
        lambda c: f"{c.forward_over_reverse:.2g}",
        lambda c: "" if c.modes_settled else c.modes_why or "tied",
        lambda c: not c.modes_settled,  # no ratio shown unless settled
        [
            _framed_entry("settled by the rule (framed, bold)"),
            _unsettled_entry("not settled, no ratio shown"),
        ],
    )


ARTEFACT = "(artefact)"


def regret(axes: tuple[str, str], cells: list[Cell]) -> Figure | None:
    """auto's time over the best exact strategy's; framed where settled slower by REGRET_BOUND+."""
    found = [c for c in cells if c.regret is not None]
    if not found:
        return None
    top = max(2.0, *(c.regret for c in found if c.regret))
    norm = colors.TwoSlopeNorm(
        vmin=min(0.5, *(c.regret for c in found if c.regret)), vcenter=1.0, vmax=top
    )
    entries: list[Artist] = [
        _framed_entry(f"auto settled slower by more than {REGRET_BOUND:.2f}x (framed)"),
        _unsettled_entry(f"not settled (below {1 / REGRET_BOUND:.2f}: no value shown)"),
    ]
    if any(c.regret_artefact for c in found):
        entries.append(
            Patch(
                fc="white",
                label=f"{ARTEFACT} below {1 / REGRET_BOUND:.2f}: auto runs one of the "
                "strategies it beats, so a measurement artefact",
            )
        )
    return _colour_panels(
        axes,
        cells,
        lambda c: c.regret,
        norm,
        "PuOr_r",
        "auto / best exact (time)",
        lambda c: c.auto_loses,
        lambda c: f"{c.regret:.2f}" + (f" {ARTEFACT}" if c.regret_artefact else ""),
        lambda c: c.regret_why,
        # below 1/REGRET_BOUND, auto beats every strategy it chooses among: shown only where
        # settled (and then marked an artefact), never as an unsettled value
        lambda c: bool(c.regret_why) and (c.regret or 1.0) < 1 / REGRET_BOUND,
        entries,
    )


def heat_maps(axes: tuple[str, str] | None, cells: list[Cell]) -> dict[str, Figure]:
    if axes is None or not cells:
        return {}
    figures = {
        "map_winner": winners(axes, cells),
        "map_forward_over_reverse": forward_over_reverse(axes, cells),
        "map_auto_regret": regret(axes, cells),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}
