"""Reports made from a results folder alone: tables, plots, a recommendation, comparisons.

Everything here reads recorded rows (parquet), never live objects, so a report can be made
from results copied off a cluster.
"""

from jacbench.report.build import write_report

__all__ = ["write_report"]
