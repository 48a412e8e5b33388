"""Whether measured times can be told apart: torch.utils.benchmark's spread warning (kept as
the ``timing_warning`` column) and overlapping spreads. A leaf module (pandas only), so reports
and experiment answers judge a winner the same way."""

from __future__ import annotations

import pandas as pd


def is_noisy(timing_warning: object) -> bool:
    return isinstance(timing_warning, str) and bool(timing_warning)


def _seconds(value: object) -> float:
    return 0.0 if value is None or pd.isna(value) else float(value)


def _name(row: pd.Series) -> str:
    return str(row.get("label") or row["strategy"])


def unsettled(best: pd.Series, runner: pd.Series) -> str:
    """Why the fastest and the runner-up cannot be told apart: a noisy timing of either, or
    medians closer than their spreads (half the IQRs added)."""
    noisy = [_name(r) for r in (best, runner) if is_noisy(r.get("timing_warning"))]
    if noisy:
        return f"the timing of {' and '.join(noisy)} is noisy (IQR above 10% of the median)"
    gap = float(runner["time_median_s"] - best["time_median_s"])
    spread = (_seconds(best.get("time_iqr_s")) + _seconds(runner.get("time_iqr_s"))) / 2
    if gap <= spread:
        return f"their medians differ by {gap:.2g} s, within their spread ({spread:.2g} s)"
    return ""
