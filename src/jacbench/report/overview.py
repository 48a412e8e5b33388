"""The answer on the first screen: what a sweep's parent run says in the MLflow UI.

Made from the sweep's recorded rows (like the report): a markdown description with the
recommendation per problem (and the experiment's answer), short tags naming the recommended
strategy and its speedup over ``functional``, a readable run name, and a compact summary
table that MLflow can show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from jacbench.report.analysis import RULE, Recommendation, recommend
from jacbench.report.problems import DEFAULT_STRATEGY, normalise, problems

# The summary table's columns, in units read at a glance (what log_table shows).
TABLE_COLUMNS = [
    "strategy",
    "model",
    "n_in",
    "n_out",
    "dtype",
    "device",
    "status",
    "time_median_ms",
    "err_eps",
    "rel_err",
    "within_tol",
    "error_message",
]


@dataclass(frozen=True)
class Overview:
    description: str  # markdown: the parent run's mlflow.note.content
    tags: dict[str, str] = field(default_factory=dict)


def jobs_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per job with readable units; JSON-safe for ``MlflowClient.log_table``."""
    table = rows.assign(time_median_ms=rows["time_median_s"] * 1e3)
    table = table[[c for c in TABLE_COLUMNS if c in table.columns]].copy()
    for name in table.columns:  # JSON: plain objects, None for missing values
        table[name] = table[name].astype(object).where(table[name].notna(), None)
    return table


def distinguishing(titles: list[str]) -> list[str]:
    """Each title without the words all titles share: ``mlp (N=32, M=48) float16 cpu`` and
    ``... float32 cpu`` become ``float16`` and ``float32``."""
    words = [title.split() for title in titles]
    shared = set.intersection(*(set(w) for w in words)) if words else set()
    return [" ".join(w for w in ws if w not in shared) for ws in words]


def headline(recs: list[Recommendation]) -> str:
    """The recommendation in one line: the choice, or for several problems each problem's
    distinguishing words and its choice (a bare list of strategies would not say which
    problem each one answers)."""
    if len({rec.choice() for rec in recs}) == 1:
        return recs[0].choice()
    labels = distinguishing([rec.problem for rec in recs])
    return "; ".join(f"{label}: {rec.choice()}" for label, rec in zip(labels, recs, strict=True))


def overview(rows: pd.DataFrame, answer: str = "", sweep_line: str = "") -> Overview:
    """The parent run's description and tags from the sweep's rows. The description's first
    line is the answer in one line (the runs table shows only that line)."""
    rows, _ = normalise(rows)
    recs = [recommend(title, group) for title, group in problems(rows)]
    first = "**Recommended: " + headline(recs) + "**" if recs else "Nothing was recorded."
    speedups = [f"{r.speedup_vs_default:.3g}x" for r in recs if r.speedup_vs_default]
    if speedups:
        first += f" ({', '.join(speedups)} faster than `{DEFAULT_STRATEGY}`)"
    lines = [first, "", "## Recommendation per problem", ""]
    lines += [f"- {rec.sentence()}" for rec in recs]
    lines += ["", RULE]
    if answer:
        lines += ["", "## Answer", "", "```text", answer.rstrip(), "```"]
    lines += [
        "",
        "## More",
        "",
        "Artifacts: `report/report.html` (tables and plots), `answer.md`, "
        "`summary_table.json` (one line per job), `summary.parquet`. "
        "Child runs: one per job, metrics `time_median_ms`, `err_eps`, `log10_rel_err`.",
    ]
    if sweep_line:
        lines += ["", sweep_line]
    tags: dict[str, str] = {}
    if recs:
        names = dict.fromkeys(rec.choice(with_alternative=False) for rec in recs)
        tags["recommended_strategy"] = ", ".join(names)[:5000]
    alternatives = [rec.choice() for rec in recs if rec.alternative and not rec.unsettled]
    if alternatives:
        tags["recommended_with_alternative"] = ", ".join(dict.fromkeys(alternatives))[:5000]
    if speedups:
        tags[f"speedup_vs_{DEFAULT_STRATEGY}"] = ", ".join(speedups)
    return Overview("\n".join(lines) + "\n", tags)
