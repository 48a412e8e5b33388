"""The one rule for "A beats B" (``verdict``): A's confidence interval of the median time lies
wholly below B's, and B was not timed while its process waited for its core (a contended
loser's time is not its code's alone). Overlapping intervals are a tie; a time without an
interval (fewer than ``MIN_BLOCKS`` timed blocks, or a row from before blocks were kept)
decides nothing. "Settled" means exactly this verdict, and nothing else (docs/columns.md).

Every comparison jacbench prints of recorded rows (answers, report, recommendation, figures,
maps, MLflow parent) asks ``verdict`` here; ``compare_intervals`` is its interval part alone,
for times that have no rows. A leaf module (no torch, no pandas) so readers of results and
the timer share it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from jacbench.core.contention import CONTENDED, contended

MIN_BLOCKS = 6  # timed blocks per job: with 6, [min, max] is a 97% interval of the median
CONFIDENCE = 0.95  # at least this coverage for the interval of the median
# CONTENDED (jacbench.core.contention): a job timed while its process waited for its core
# (CPU/wall per thread below it): its time rises with the machine's load (CPU time too, cold
# caches after every switch: measured 1.2-1.5x on two cores beside a CPU-bound process), so a
# difference is not its code's alone.


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (order statistics, binomial
    ranks): no assumption about how block times are spread, which on a loaded machine is
    anything but normal. Needs ``MIN_BLOCKS`` values or more for ``CONFIDENCE``."""
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
        """``1.14 ms [1.10-1.60]``: the median and its interval in one unit, all three with the
        decimals of the median's three significant digits."""
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


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]  # any cell: what float() refuses is caught
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class Basis(str, Enum):
    """Which time is compared: wall time (what a user waits) or process CPU time (what the
    code costs; a busy machine hardly moves it, so runs made at different times compare)."""

    WALL = "time"
    CPU = "cpu"


def interval_of(
    row: Mapping[str, object], name: str | None = None, basis: Basis = Basis.WALL
) -> Interval | None:
    """The interval recorded in a result row (a dict or a pandas Series), or None where the row
    has none: fewer than ``MIN_BLOCKS`` blocks, or an older row without blocks."""
    label = name or str(row.get("label") or row.get("strategy") or "?")
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
    """A against B by the rule, and the sentence that says so with both intervals."""

    order: Order
    text: str

    @property
    def decided(self) -> bool:
        return self.order in (Order.FASTER, Order.SLOWER)


def compare_intervals(a: Interval, b: Interval) -> Comparison:
    """The rule itself: A beats B when A's interval lies wholly below B's."""
    both = f"{a.name} {a.text()} vs {b.name} {b.text()}"
    if a.high < b.low:
        return Comparison(Order.FASTER, f"{a.name} is faster: {both}")
    if b.high < a.low:
        return Comparison(Order.SLOWER, f"{b.name} is faster: {both}")
    return Comparison(Order.TIED, f"tied, the intervals overlap: {both}")


def compare_times(a: Mapping[str, object], b: Mapping[str, object]) -> Comparison:
    """Two result rows by their intervals alone, named by their labels (or strategies);
    ``verdict`` adds the loser's contention."""
    ia, ib = interval_of(a), interval_of(b)
    if ia is None or ib is None:
        names = [
            str(r.get("label") or r.get("strategy") or "?")
            for r, iv in ((a, ia), (b, ib))
            if iv is None
        ]
        return Comparison(
            Order.UNKNOWN,
            f"no confidence interval for {' and '.join(names)} (fewer than {MIN_BLOCKS} "
            "timed blocks): their order is not known",
        )
    return compare_intervals(ia, ib)


def settled_ratio(a: Mapping[str, object], b: Mapping[str, object]) -> float | None:
    """A's median over B's where the rule settles their order; None where it does not, so that
    no ratio is ever quoted from a tie, a contended loser or a time without a spread."""
    if not verdict(a, b).decided:
        return None
    # a decided verdict read both medians as numbers
    return float(a["time_median_s"]) / float(b["time_median_s"])  # type: ignore[arg-type]


def contention(row: Mapping[str, object]) -> float | None:
    """The row's CPU/wall per thread where its process waited for its core while timed
    (below ``CONTENDED``); None where it did not, or the row does not say. Only on a CPU
    device: on a GPU the process also waits for the device, so CPU/wall tells nothing there."""
    share, threads = _number(row.get("cpu_wall_ratio")), _number(row.get("threads"))
    if share is None or threads is None:
        return None
    return contended(share / max(threads, 1.0), str(row.get("device")))


def _name(row: Mapping[str, object]) -> str:
    return str(row.get("label") or row.get("strategy") or "?")


def verdict(a: Mapping[str, object], b: Mapping[str, object]) -> Comparison:
    """A against B by the whole rule: the intervals (``compare_times``), then the loser's
    contention. A contended winner won all the same: contention only adds time."""
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


def unsettled(best: Mapping[str, object], runner: Mapping[str, object]) -> str:
    """Why ``best`` (the lower median) is not shown to beat ``runner`` by the rule, with both
    figures; "" when it is."""
    found = verdict(best, runner)
    return "" if found.order == Order.FASTER else found.text
