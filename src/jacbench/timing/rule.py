"""The one rule for "A beats B" (``verdict``): A's confidence interval of the median time lies
wholly below B's. Wall time decides unless a row was timed while its process waited for a
core; then CPU time decides, said so. Two rows timed side by side (one ``pair_id``) are
judged by their ratio across the interleaved blocks. Overlap is a tie; a time without an
interval decides nothing. A leaf module (no torch, no pandas). docs/columns.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from jacbench.core.contention import CONTENDED, contended

MIN_BLOCKS = 6  # timed blocks per job: with 6, [min, max] is a 97% interval of the median
CONFIDENCE = 0.95  # at least this coverage for the interval of the median


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (order statistics, binomial
    ranks); needs ``MIN_BLOCKS`` values or more for ``CONFIDENCE``."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no times to take an interval of")
    # [x_(k), x_(n-k+1)] covers the median with 1 - 2 P(X <= k-1): the largest k that keeps it
    k = 1
    while 2 * _binom_cdf(k, n) <= 1 - CONFIDENCE:
        k += 1
    return xs[k - 1], xs[n - k]


class Order(str, Enum):
    """How A stands against B."""

    FASTER = "faster"
    SLOWER = "slower"
    TIED = "tied"  # the intervals overlap
    CONTENDED = "contended"  # the intervals are apart, but the slower one waited for its core
    UNKNOWN = "unknown"  # one of them has no interval: nothing can be said


@dataclass(frozen=True)
class Interval:
    """A median time with its confidence interval, in seconds."""

    name: str
    median: float
    low: float
    high: float
    n_blocks: int

    def text(self) -> str:
        """``1.14 ms [1.10-1.60]``: the median and its interval in one unit, with the decimals
        of the median's three significant digits."""
        unit, scale = time_unit(self.median)
        places = decimals(self.median * scale)
        median, low, high = (f"{v * scale:.{places}f}" for v in (self.median, self.low, self.high))
        return f"{median} {unit} [{low}-{high}]"


def decimals(value: float) -> int:
    """Decimal places that give ``value`` three significant digits (none from 100 up)."""
    if value == 0 or not math.isfinite(value):
        return 0
    return max(0, 2 - math.floor(math.log10(abs(value))))


def digits(value: float) -> str:
    """Three significant digits, never in exponent form (1040, not 1.04e+03)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def time_unit(seconds: float) -> tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("us", 1e6)):
        if abs(seconds) * scale >= 1:
            return unit, scale
    return "ns", 1e9


def _name(row: Mapping[str, object]) -> str:
    return str(row.get("label") or row.get("strategy") or "?")


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]  # any cell: what float() refuses is caught
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class Basis(str, Enum):
    """Which time is compared: wall time (what a user waits), process CPU time (what the
    code costs, hardly moved by load) or the timed thread's CPU time."""

    WALL = "time"
    CPU = "cpu"
    THREAD_CPU = "thread_cpu"


BUSY = "by CPU time: the machine was busy"  # what a verdict drawn from CPU time says


def interval_of(
    row: Mapping[str, object], name: str | None = None, basis: Basis = Basis.WALL
) -> Interval | None:
    """The interval a result row records, or None (fewer than ``MIN_BLOCKS`` blocks)."""
    label = name or _name(row)
    median = _number(row.get(f"{basis.value}_median_s"))
    low = _number(row.get(f"{basis.value}_ci_low_s"))
    high = _number(row.get(f"{basis.value}_ci_high_s"))
    blocks = _number(row.get("n_blocks"))
    if median is None or low is None or high is None or blocks is None:
        return None
    if blocks < MIN_BLOCKS or not low <= median <= high:
        return None
    return Interval(label, median, low, high, int(blocks))


@dataclass(frozen=True)
class Comparison:
    """A against B by the rule, and the sentence that says so with both intervals; ``basis``
    the time compared, ``ratio`` A's time over B's on it where the order is decided."""

    order: Order
    text: str
    basis: Basis = Basis.WALL
    ratio: float | None = None

    @property
    def decided(self) -> bool:
        return self.order in (Order.FASTER, Order.SLOWER)


def compare_intervals(a: Interval, b: Interval, basis: Basis = Basis.WALL) -> Comparison:
    """The rule itself: A beats B when A's interval lies wholly below B's."""
    both = f"{a.name} {a.text()} vs {b.name} {b.text()}"
    ratio = a.median / b.median if b.median > 0 else None
    if a.high < b.low:
        return Comparison(Order.FASTER, f"{a.name} is faster: {both}", basis, ratio)
    if b.high < a.low:
        return Comparison(Order.SLOWER, f"{b.name} is faster: {both}", basis, ratio)
    return Comparison(Order.TIED, f"tied, the intervals overlap: {both}", basis)


def compare_times(a: Mapping[str, object], b: Mapping[str, object]) -> Comparison:
    """Two rows by their intervals alone; ``verdict`` adds the loser's contention."""
    ia, ib = interval_of(a), interval_of(b)
    if ia is None or ib is None:
        names = [_name(r) for r, iv in ((a, ia), (b, ib)) if iv is None]
        return Comparison(
            Order.UNKNOWN,
            f"no confidence interval for {' and '.join(names)} (fewer than {MIN_BLOCKS} "
            "timed blocks): their order is not known",
        )
    return compare_intervals(ia, ib)


def settled_ratio(a: Mapping[str, object], b: Mapping[str, object]) -> float | None:
    """A's time over B's on the basis the rule compared them by, where it settles their order."""
    found = verdict(a, b)
    return found.ratio if found.decided else None


def time_ratio(a: Mapping[str, object], b: Mapping[str, object]) -> float:
    """A's time over B's: ``settled_ratio``, else their wall medians'."""
    wall = float(a["time_median_s"]) / float(b["time_median_s"])  # type: ignore[arg-type]
    return settled_ratio(a, b) or wall


def contention(row: Mapping[str, object]) -> float | None:
    """The row's CPU/wall per thread where its process waited for its core while timed
    (below ``CONTENDED``, on a CPU device); None where it did not, or the row does not say."""
    share, threads = _number(row.get("cpu_wall_ratio")), _number(row.get("threads"))
    if share is None or threads is None:
        return None
    return contended(share / max(threads, 1.0), str(row.get("device")))


def cpu_basis(*rows: Mapping[str, object]) -> Basis:
    """The CPU time that stands for the code's cost in ``rows``: the timed thread's where
    each row has it and torch computed on that thread alone, else the process's."""
    for row in rows:
        threads = _number(row.get("threads"))
        if (threads or 1.0) > 1 or interval_of(row, basis=Basis.THREAD_CPU) is None:
            return Basis.CPU
    return Basis.THREAD_CPU


def busy(*rows: Mapping[str, object]) -> bool:
    """Whether any of ``rows`` was timed while its process waited for its core."""
    return any(contention(row) is not None for row in rows)


def _blocks(row: Mapping[str, object], basis: Basis) -> list[float] | None:
    values = row.get(f"{basis.value}_blocks_s")
    if values is None or isinstance(values, (str, bytes)):
        return None
    try:
        found = [float(v) for v in values]  # type: ignore[attr-defined]  # a list or an array
    except (TypeError, ValueError):
        return None
    return found if all(math.isfinite(v) and v > 0 for v in found) else None


def side_by_side_ratio(
    a: Mapping[str, object], b: Mapping[str, object], basis: Basis
) -> Interval | None:
    """A's time over B's per interleaved round, as its median and interval, where the two
    rows were timed side by side in one job (one ``pair_id``, as many blocks each); None
    elsewhere."""
    pair = str(a.get("pair_id") or "")
    if not pair or pair != str(b.get("pair_id") or ""):
        return None
    ta, tb = _blocks(a, basis), _blocks(b, basis)
    if ta is None or tb is None or len(ta) != len(tb) or len(ta) < MIN_BLOCKS:
        return None
    ratios = [x / y for x, y in zip(ta, tb, strict=True)]
    low, high = median_interval(ratios)
    return Interval("ratio", statistics.median(ratios), low, high, len(ratios))


def _by_ratio(
    a: Mapping[str, object], b: Mapping[str, object], ratio: Interval, basis: Basis
) -> Comparison:
    """The verdict of a side-by-side pair from its ratio's interval (1 inside: tied)."""
    busy_note = f" ({BUSY})" if basis != Basis.WALL else ""
    ta, tb = _texts(a, b, basis)
    both = f"; {_name(a)} {ta} vs {_name(b)} {tb}"
    if basis != Basis.WALL:
        both += "; wall time {} vs {}".format(*_texts(a, b))
    told = (
        f"{_name(a)} / {_name(b)} across {ratio.n_blocks} interleaved blocks "
        f"{digits(ratio.median)} [{digits(ratio.low)}-{digits(ratio.high)}]{busy_note}{both}"
    )
    if ratio.high < 1:
        return Comparison(Order.FASTER, f"{_name(a)} is faster: {told}", basis, ratio.median)
    if ratio.low > 1:
        return Comparison(Order.SLOWER, f"{_name(b)} is faster: {told}", basis, ratio.median)
    return Comparison(Order.TIED, f"tied, the ratio's interval holds 1: {told}", basis)


def _by_cpu(a: Mapping[str, object], b: Mapping[str, object]) -> Comparison | None:
    """A against B by CPU time, wall time beside it; None where a row has no CPU interval."""
    basis = cpu_basis(a, b)
    ia, ib = interval_of(a, basis=basis), interval_of(b, basis=basis)
    if ia is None or ib is None:
        return None
    found = compare_intervals(ia, ib, basis)
    wall = "wall time {} vs {}".format(*_texts(a, b))
    return Comparison(found.order, f"{found.text} ({BUSY}; {wall})", basis, found.ratio)


def _texts(
    a: Mapping[str, object], b: Mapping[str, object], basis: Basis = Basis.WALL
) -> list[str]:
    """Each row's interval on ``basis`` as text, "-" where it has none."""
    return [iv.text() if iv else "-" for iv in (interval_of(r, basis=basis) for r in (a, b))]


def verdict(a: Mapping[str, object], b: Mapping[str, object]) -> Comparison:
    """A against B by the whole rule: a side-by-side pair by its ratio; else by wall-time
    intervals where neither waited for its core, by CPU-time ones where one did, and where a
    row has none, by wall time with the loser's contention leaving the order unsettled."""
    loaded = busy(a, b)
    basis = cpu_basis(a, b) if loaded else Basis.WALL
    ratio = side_by_side_ratio(a, b, basis)
    if ratio is not None:
        return _by_ratio(a, b, ratio, basis)
    if loaded and (by_cpu := _by_cpu(a, b)) is not None:
        return by_cpu
    by_intervals = compare_times(a, b)
    if not by_intervals.decided:
        return by_intervals
    loser = b if by_intervals.order == Order.FASTER else a
    share = contention(loser)
    if share is None:
        return by_intervals
    return Comparison(
        Order.CONTENDED,
        f"{_name(loser)} waited for its core while timed (CPU/wall per thread {share:.2f}, "
        f"below {CONTENDED}), so its time is not its code's alone: {by_intervals.text}",
    )


def ranking_seconds(row: Mapping[str, object], loaded: bool) -> float | None:
    """What a row is ranked by among its problem's: its wall median, or where the problem
    was timed on a busy machine (``loaded``), its CPU median (``cpu_basis``)."""
    if loaded:
        found = interval_of(row, basis=cpu_basis(row))
        if found is not None:
            return found.median
    return _number(row.get("time_median_s"))


# What an unsettled order is, in a word a figure's cell can hold.
UNSETTLED_WHY = {
    Order.TIED: "tied",
    Order.CONTENDED: "waited",
    Order.UNKNOWN: "no interval",
}


def why_unsettled(order: Order) -> str:
    """The word for an order the rule does not settle ("" for a settled one)."""
    return UNSETTLED_WHY.get(order, "")


def unsettled(best: Mapping[str, object], runner: Mapping[str, object]) -> str:
    """Why ``best`` (the lower median) is not shown to beat ``runner`` by the rule, with both
    figures; "" when it is."""
    found = verdict(best, runner)
    return "" if found.order == Order.FASTER else found.text
