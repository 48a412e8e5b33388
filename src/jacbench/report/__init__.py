"""Reports from recorded rows (parquet) alone, never live objects, so results copied off a
cluster can be reported: tables, plots, a recommendation, comparisons. ``write_report`` (pandas,
matplotlib) is imported on first use: ``python -m jacbench.report`` checks its arguments first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jacbench.report.build import write_report

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    if name != "write_report":
        raise AttributeError(f"module 'jacbench.report' has no attribute {name!r}")
    from jacbench.report.build import write_report

    return write_report
