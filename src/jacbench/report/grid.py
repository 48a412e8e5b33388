"""A sweep over two numeric axes read as a map: per cell, the settled winner, best forward over
best reverse and auto's regret, each by ``analysis.recommend`` and the rule (unsettled: a tie)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from jacbench.core.enums import Kind
from jacbench.report.analysis import best_of_each_mode, recommend
from jacbench.report.problems import moments, parse_options, standing
from jacbench.timing.rule import Order, time_ratio, verdict, why_unsettled

AXES = ("n_in", "n_out")  # preferred axes: the Jacobian's columns and rows
FAMILY_KEYS = ["model", "dtype", "device", "wrt", "batch"]
AUTO = "auto"
# auto's regret (its time / the best exact strategy's) above which a cell counts as one it
# loses, where the rule also settles that auto is slower (issue 47's target)
REGRET_BOUND = 1.10


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def with_axes(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each numeric model option as a column ``opt.<key>``."""
    options = [parse_options(text) for text in rows["model_options"]]
    keys = sorted({k for o in options for k, v in o.items() if _numeric(v)} - set(AXES))
    rows = rows.copy()
    for key in keys:
        rows[f"opt.{key}"] = [o.get(key) if _numeric(o.get(key)) else math.nan for o in options]
    return rows


def grid_axes(rows: pd.DataFrame) -> tuple[str, str] | None:
    """The two numeric columns a sweep varied (N and M first, then model options), or None."""
    if rows.empty:
        return None
    candidates = [*AXES, *(c for c in rows.columns if c.startswith("opt."))]
    varied = [c for c in candidates if pd.to_numeric(rows[c], errors="coerce").nunique() >= 2]
    return (varied[0], varied[1]) if len(varied) >= 2 else None


def axis_name(column: str) -> str:
    return {"n_in": "inputs N", "n_out": "outputs M"}.get(column, column.removeprefix("opt."))


@dataclass(frozen=True)
class Cell:
    """One cell of one family's map (a model, dtype and device at one point of the axes)."""

    family: str
    x: float
    y: float
    winner: str = ""  # the settled winner (auto left out: it runs one of the others)
    tied: tuple[str, ...] = ()  # where no winner is settled: the best and its runner-up
    forward_over_reverse: float | None = None  # best forward / best reverse time (exact)
    modes_settled: bool = False  # the rule tells best forward and best reverse apart
    regret: float | None = None  # auto / the best exact strategy (auto left out)
    auto_loses: bool = False  # regret above REGRET_BOUND and auto settled slower
    best_exact: str = ""
    auto_contended: bool = False  # auto is slower but waited for its core while timed
    dtype: str = ""
    # auto ran the best exact strategy itself: a loss is then two jobs of the same code
    auto_ran_best: bool = False
    # why an order is not settled, in a word (``rule.why_unsettled``: tied, waited, no
    # interval; "the same code" where auto and the strategy it ran disagree): "" if settled
    winner_why: str = ""
    modes_why: str = ""
    regret_why: str = ""

    @property
    def regret_artefact(self) -> bool:
        """auto settled faster than the best strategy it chooses among by more than
        REGRET_BOUND: a value auto cannot reach, so a measurement artefact."""
        return self.regret is not None and not self.regret_why and self.regret < 1 / REGRET_BOUND


def by_family(found: list[Cell]) -> dict[str, list[Cell]]:
    """The cells of each family (a heat map's panel, a console grid), in order of appearance."""
    families: dict[str, list[Cell]] = {}
    for c in found:
        families.setdefault(c.family, []).append(c)
    return families


def _fastest(ranked: pd.DataFrame) -> pd.Series | None:
    """The first timed row of rows ranked by ``problems.standing``."""
    timed = ranked.dropna(subset=["time_median_s"])
    return timed.iloc[0] if len(timed) else None


@dataclass(frozen=True)
class AutoAgainstBest:
    """``auto``'s usable row of one cell against the fastest exact strategy's, of one moment
    (``problems.Moments.pair``: their side-by-side re-timing where there is one)."""

    auto: pd.Series
    best: pd.Series

    @property
    def regret(self) -> float:
        """auto's time over the best's, on the basis the rule compared them by where it
        settles their order (CPU time on a busy machine), else their wall medians."""
        return time_ratio(self.auto, self.best)

    @cached_property
    def order(self) -> Order:
        return verdict(self.auto, self.best).order

    @property
    def over_bound(self) -> bool:
        """auto's time is more than REGRET_BOUND times the best's (settled or not)."""
        return self.regret > REGRET_BOUND

    @property
    def loses(self) -> bool:
        """Slower by more than REGRET_BOUND, and the rule settles that it is slower."""
        return self.over_bound and self.order == Order.SLOWER

    @property
    def ran_best(self) -> bool:
        """auto ran the best exact strategy itself: a loss is then two jobs of one code."""
        return str(self.auto.get("chosen_strategy") or "") == str(self.best["strategy"])


def auto_against_best(rows: pd.DataFrame) -> AutoAgainstBest | None:
    """auto and the best exact strategy among one cell's normalised rows (None without both)."""
    others = standing(rows[rows["strategy"] != AUTO])  # usable, fastest first
    best = _fastest(others[others["strategy_kind"] == Kind.EXACT])
    auto = _fastest(standing(rows[rows["strategy"] == AUTO]))
    if best is None or auto is None:
        return None
    return AutoAgainstBest(*moments(rows).pair(auto["label"], best["label"]))


def _winner_why(rows: pd.DataFrame, best: str | None, runner: str | None, text: str) -> str:
    """Why best is not settled ahead of runner, in a word."""
    if not best or not runner or not text:
        return ""
    if text.startswith("the measurements disagree"):
        return "the same code"
    return why_unsettled(verdict(*moments(rows).pair(best, runner)).order) or "tied"


def _cell(family: str, x: float, y: float, rows: pd.DataFrame) -> Cell:
    others = rows[rows["strategy"] != AUTO]
    rec = recommend(family, others)
    winner = rec.best if rec.best and not rec.unsettled else ""
    tied = (rec.best, rec.runner_up) if rec.best and rec.unsettled and rec.runner_up else ()
    ratio, modes_settled, modes_why = None, False, ""
    if (modes := best_of_each_mode(others)) is not None:  # (forward, reverse)
        found = verdict(*modes)
        ratio, modes_settled = time_ratio(*modes), found.decided
        modes_why = why_unsettled(found.order)
    against = auto_against_best(rows)
    regret_why = "" if against is None else why_unsettled(against.order)
    return Cell(
        family,
        x,
        y,
        str(winner or ""),
        tuple(str(t) for t in tied),
        ratio,
        modes_settled,
        None if against is None else against.regret,
        against is not None and against.loses,
        "" if against is None else str(against.best["label"]),
        against is not None and against.order == Order.CONTENDED,
        str(rows["dtype"].iloc[0]) if "dtype" in rows and len(rows) else "",
        against is not None and against.ran_best,
        _winner_why(others, rec.best, rec.runner_up, rec.unsettled),
        modes_why,
        regret_why,
    )


def family_name(key: tuple, fixed: list[str], varying: set[str]) -> str:
    """``model dtype device``, plus the fixed options telling it from the model's other families."""
    model, dtype, device, wrt, batch, *rest = key
    name = f"{model} {dtype} {device}"
    name += " wrt params" if wrt == "params" else ""
    name += f" batch {batch}" if batch and int(batch) > 1 else ""
    told = [f"{axis_name(c)}={v:g}" for c, v in zip(fixed, rest, strict=True) if c in varying]
    return " ".join([name, *told])


def cells(rows: pd.DataFrame) -> tuple[tuple[str, str] | None, list[Cell]]:
    """The map of normalised rows: its axes, and a cell per family and point (in order)."""
    rows = with_axes(rows)
    axes = grid_axes(rows)
    if axes is None:
        return None, []
    x, y = axes
    fixed = [c for c in rows.columns if c.startswith("opt.") and c not in axes]
    keys = FAMILY_KEYS + fixed
    varying = {c for c in fixed if rows.groupby("model")[c].nunique().max() > 1}
    found: list[Cell] = []
    for key, family in rows.groupby(keys, dropna=False, sort=False):
        if family[x].nunique() < 2 or family[y].nunique() < 2:
            continue  # this model does not span the axes
        name = family_name(key, fixed, varying)
        for (vx, vy), group in family.groupby([x, y], sort=True):
            found.append(_cell(name, float(vx), float(vy), group))
    return axes, found


@dataclass(frozen=True)
class MapSummary:
    """What the map says in words: auto's regret, and where the textbook rule loses."""

    settled_cells: int  # cells with a settled winner, an auto row, auto's time its own
    regrets: list[float]
    worst: Cell | None
    # cells where auto is settled slower by over REGRET_BOUND (framed), settled winner or not
    losses: list[Cell]
    textbook_losses: list[Cell]  # settled cells where M >= N -> forward picked the wrong mode
    contended: list[Cell] = field(default_factory=list)  # auto slower, but it waited: left out
    by_dtype: dict[str, list[float]] = field(default_factory=dict)
    # auto measured faster than 1/REGRET_BOUND of the best it chooses among: a value it cannot
    # reach, so a measurement artefact (settled or not): left out of the median
    artefacts: list[Cell] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        if self.worst is not None and self.regrets:
            w = self.worst
            per_dtype = ", ".join(
                f"{dtype} median {_median(found):.2f} over {len(found)}"
                for dtype, found in sorted(self.by_dtype.items())
            )
            out.append(
                f"auto / best exact over {self.settled_cells} cells with a settled winner: "
                f"median {_median(self.regrets):.2f}, worst {max(self.regrets):.2f} "
                f"({w.family}, N={w.x:g}, M={w.y:g}, against {w.best_exact}); "
                f"{per_dtype}; {len(self.losses)} cell(s) "
                f"where auto is settled slower by more than {REGRET_BOUND:.2f}x"
                + (": " + "; ".join(_loss(c) for c in self.losses) if self.losses else "")
            )
        if self.artefacts:
            out.append(
                f"{len(self.artefacts)} cell(s) with a settled winner left out where auto measured "
                f"under {1 / REGRET_BOUND:.2f}x the best it chooses among, a value it cannot "
                "reach: a measurement artefact ("
                + "; ".join(
                    f"{_where(c)} {c.regret:.2f}{'' if not c.regret_why else ', ' + c.regret_why}"
                    for c in self.artefacts
                )
                + ")"
            )
        if self.contended:
            out.append(
                f"{len(self.contended)} more cell(s) with a settled winner left out: auto was "
                "slower there but waited for its core while timed (its time is not its code's "
                "alone; run them again on a quieter machine)"
            )
        if self.textbook_losses:
            out.append(
                "the textbook rule (M >= N: forward mode) picks the slower mode in "
                f"{len(self.textbook_losses)} cell(s) where the rule settles the modes: "
                + "; ".join(
                    f"{_where(c)} ({'reverse' if c.forward_over_reverse > 1 else 'forward'} "
                    f"{max(c.forward_over_reverse, 1 / c.forward_over_reverse):.2f}x faster)"
                    for c in self.textbook_losses
                    if c.forward_over_reverse
                )
            )
        return out


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _loss(cell: Cell) -> str:
    unsettled = "" if cell.winner else ", no settled winner"
    same = (
        f", auto ran {cell.best_exact} itself: two jobs of one code" if cell.auto_ran_best else ""
    )
    return f"{_where(cell)} ({cell.regret:.2f}{unsettled}{same})"


def _where(cell: Cell) -> str:
    return f"{cell.family} N={cell.x:g} M={cell.y:g}"


def summarise(axes: tuple[str, str] | None, found: list[Cell]) -> MapSummary:
    """auto's regret where the winner is settled; the textbook rule's losses (N and M axes)."""
    settled = [c for c in found if c.winner and c.regret is not None]
    out_of_reach = [c for c in settled if (c.regret or 1.0) < 1 / REGRET_BOUND]
    scored = [c for c in settled if not c.auto_contended and c not in out_of_reach]
    by_dtype: dict[str, list[float]] = {}
    for c in scored:
        by_dtype.setdefault(c.dtype, []).append(c.regret or 0.0)
    worst = max(scored, key=lambda c: c.regret or 0.0, default=None)
    textbook = [  # forward wins (a ratio below 1) where M < N, or reverse where M >= N
        c
        for c in found
        if axes == AXES
        and c.modes_settled
        and c.forward_over_reverse is not None
        and (c.forward_over_reverse < 1) != (c.y >= c.x)
    ]
    return MapSummary(
        len(scored),
        [c.regret for c in scored if c.regret is not None],
        worst,
        [c for c in found if c.auto_loses],  # as the heat map frames them
        textbook,
        [c for c in settled if c.auto_contended],
        by_dtype,
        out_of_reach,
    )
