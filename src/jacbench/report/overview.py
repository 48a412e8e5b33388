"""What a sweep's parent run shows in the MLflow UI, from its rows as the report reads them: a
markdown description of each problem's recommendation, tags, and a summary table."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from jacbench.record import variant
from jacbench.record.markdown import markdown_safe
from jacbench.report.analysis import RULE, Recommendation, recommend
from jacbench.report.display import time_text
from jacbench.report.problems import DEFAULT_STRATEGY, latest_ok, normalise, problems
from jacbench.timing.rule import cpu_basis, digits, interval_of

# The summary table's columns, in units read at a glance, the answer first (MLflow's table
# viewer shows the first columns without scrolling).
TABLE_COLUMNS = [
    "strategy",
    "time_median_ms",
    "time_ci_low_ms",  # the 95% interval of the median that every verdict compares
    "time_ci_high_ms",
    "err_eps",
    "within_tol",
    "model",
    "dtype",
    "status",
    "n_in",
    "n_out",
    "device",
    "rel_err",
    "error_message",
    "round",  # first, or side_by_side: a preset's re-timing of two
]


@dataclass(frozen=True)
class Overview:
    description: str  # markdown: the parent run's mlflow.note.content
    tags: dict[str, str] = field(default_factory=dict)
    # the answer as metrics in the jobs' columns, on the collapsed parent (one problem)
    metrics: dict[str, float] = field(default_factory=dict)
    # one answer run per problem where there are several: {"name", "metrics", "tags"}
    answers: list[dict] = field(default_factory=list)


def answer_metrics(rec: Recommendation, group: pd.DataFrame) -> dict[str, float]:
    """A problem's answer in the jobs' metric columns: the leader's median, interval, err_eps,
    verdict, CPU time where ranked by it and settled speedup; ``settled``: 1 if the rule says."""
    if rec.best is None:
        return {"settled": 0.0}
    best = _best_row(rec, group)
    found = {
        "settled": 0.0 if rec.unsettled else 1.0,
        "time_median_ms": best["time_median_s"] * 1e3,
        "time_ci_low_ms": _ms(best.get("time_ci_low_s")),
        "time_ci_high_ms": _ms(best.get("time_ci_high_s")),
        "err_eps": best.get("err_eps"),
        "within_tol": best.get("within_tol"),
        "exact": float(str(best["strategy_kind"]) == "exact"),
        f"speedup_vs_{DEFAULT_STRATEGY}": None if rec.unsettled else rec.speedup_vs_default,
    }
    cpu = interval_of(best, basis=cpu_basis(best)) if rec.by == "cpu" else None
    if cpu is not None:
        found |= {"cpu_median_ms": cpu.median * 1e3, "cpu_ci_low_ms": cpu.low * 1e3}
        found |= {"cpu_ci_high_ms": cpu.high * 1e3}
    return {k: float(v) for k, v in found.items() if v is not None and not pd.isna(v)}


def _best_row(rec: Recommendation, group: pd.DataFrame) -> pd.Series:
    ok = latest_ok(group)
    return ok[ok["label"] == rec.best].iloc[0]


def _ms(seconds: object) -> float | None:
    return None if seconds is None or pd.isna(seconds) else float(seconds) * 1e3  # type: ignore[arg-type]


def answers_of(recs: list[Recommendation], groups: list) -> list[dict]:
    """One answer run per problem: named by its choice, its answer as metrics."""
    return [
        {
            "name": f"answer {rec.choice(with_alternative=False)}: {rec.problem}",
            "metrics": answer_metrics(rec, group),
            "tags": {"recommended_strategy": rec.choice(with_alternative=False), "by": rec.by},
        }
        for rec, (_, group) in zip(recs, groups, strict=True)
    ]


def jobs_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per job with readable units; JSON-safe for ``MlflowClient.log_table``."""
    ms = {
        f"{name}_ms": pd.to_numeric(rows[f"{name}_s"], errors="coerce") * 1e3
        for name in ("time_median", "time_ci_low", "time_ci_high")
        if f"{name}_s" in rows
    }
    names = [variant.of_row(r) for r in rows.to_dict("records")]  # the one label
    table = rows.assign(**ms, strategy=pd.Series(names, index=rows.index, dtype=object))
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
    """The recommendation in one line: the choice, or for several problems each one's
    distinguishing words and choice (a bare list would not say which problem each answers)."""
    if len({rec.choice() for rec in recs}) == 1:
        return recs[0].choice()
    labels = distinguishing([rec.problem for rec in recs])
    return "; ".join(f"{label}: {rec.choice()}" for label, rec in zip(labels, recs, strict=True))


REPORT = "report/report.html"  # the artifact the description's first line opens
MAX_LINE = 120  # the Overview shows markdown: a longer line widens the page


def _wrapped(text: str, indent: str = "") -> list[str]:
    """Lines of at most MAX_LINE characters, words never broken (a broken link is no link)."""
    return textwrap.wrap(
        text, MAX_LINE, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
    )


def _short_line(rec: Recommendation, group: pd.DataFrame) -> str:
    """One problem's answer at a glance: ``mlp f64: use jacfwd, 1.1 ms [1.0-1.2], 48x faster
    than functional, error 0.9 eps``; the full sentence is in the report and answer.md."""
    if rec.untimed:
        return rec.sentence()
    if rec.best is None or rec.unsettled:
        reason = rec.none_finished or rec.unsettled
        return f"{rec.problem}: {rec.choice()}" + (f": {reason}" if reason else "")
    best = _best_row(rec, group)
    parts = [f"{rec.problem}: use **{rec.choice()}**", time_text(best)]
    if rec.speedup_vs_default:
        parts.append(f"{digits(rec.speedup_vs_default)}x faster than {DEFAULT_STRATEGY}")
    if rec.best_err_eps is not None:
        parts.append(f"error {rec.best_err_eps:.2g} eps")
    return ", ".join(parts)


def _first_line(recs: list[Recommendation], speedups: list[str], names: str) -> str:
    """The headline (the runs table shows only this line) in one line; ``names``: the picks."""
    if not recs:
        return "Nothing was recorded."
    full = "**Recommended: " + headline(recs) + "**"
    if speedups:
        full += f" ({', '.join(speedups)} faster than `{DEFAULT_STRATEGY}`)"
    short = "**Recommended: " + names + "**"
    for line in (full, short + " (per problem below)"):
        if len(line) <= MAX_LINE:
            return line
    return "**Recommended: one strategy per problem, below**"


def overview(
    rows: pd.DataFrame,
    answer: str = "",
    sweep_line: str = "",
    files: list[str] | None = None,
    links: dict[str, str] | None = None,
) -> Overview:
    """The parent run's description (its first line the answer: the runs table shows only
    that line), tags and metrics. ``files``: the artifacts to list; ``links``: artifact path
    -> its page in MLflow's artifact viewer (the report, each figure at full size)."""
    rows, _ = normalise(rows)
    groups = problems(rows)
    recs = [recommend(title, group) for title, group in groups]
    speedups = [f"{digits(r.speedup_vs_default)}x" for r in recs if r.speedup_vs_default]
    links = links or {}
    names = ", ".join(dict.fromkeys(rec.choice(with_alternative=False) for rec in recs))
    first = _first_line(recs, speedups, names)
    if REPORT in links:
        first += f" ([the report]({links[REPORT]}))"
    lines = [first, ""]  # the per-problem lines next: the collapsed description shows three
    for rec, (_, group) in zip(recs, groups, strict=True):
        # brackets escaped: MLflow's markdown reads an interval such as [970-1439] as a link
        line = _short_line(rec, group).replace("[", "\\[").replace("]", "\\]")
        lines += _wrapped("- " + line, "  ")
    lines += ["", *_wrapped(RULE)]
    if answer:
        lines += ["", *_wrapped("The full answer, with every strategy's figures: `answer.md`.")]
    listed = [f"`{name}`" for name in (files or [])]
    lines += ["", "## More", ""]
    if listed:
        lines += [*_wrapped(f"Artifacts: {', '.join(listed)}."), ""]
    figures = [f"[{Path(path).stem}]({href})" for path, href in links.items() if path != REPORT]
    if figures:
        lines += [*_wrapped(f"Figures at full size: {', '.join(figures)}."), ""]
    lines += _wrapped(
        "Child runs: one per job, metrics `time_median_ms` (interval `time_ci_low_ms` to "
        "`time_ci_high_ms`), `err_eps`, `log10_rel_err`, `log10_time_us` and `log10_err_eps` "
        "(for the charts); where the sweep has several problems, an `answer:` run per "
        "problem carries its answer in the same columns. The charts: the chart icon above "
        "the runs table."
    )
    if sweep_line:
        lines += ["", *_wrapped(sweep_line)]
    tags = {"recommended_strategy": names[:5000]} if recs else {}
    alternatives = [rec.choice() for rec in recs if rec.alternative and not rec.unsettled]
    if alternatives:
        tags["recommended_with_alternative"] = ", ".join(dict.fromkeys(alternatives))[:5000]
    if speedups:
        tags[f"speedup_vs_{DEFAULT_STRATEGY}"] = ", ".join(speedups)
    single = len(recs) == 1
    metrics = answer_metrics(recs[0], groups[0][1]) if single else {}
    answers = [] if single else answers_of(recs, groups)
    description = markdown_safe("\n".join(lines) + "\n")
    return Overview(description, tags, metrics, answers)
