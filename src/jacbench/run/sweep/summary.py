"""A sweep's summary: the jobs' rows collected into summary.parquet, the table and the
recommendations printed, the report written, what the MLflow parent run shows."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from jacbench.record.mlflow_run import ParentOutcome
from jacbench.record.parquet import SCHEMA, read_files, write_table
from jacbench.record.result import Status
from jacbench.report.display import summary_table
from jacbench.run.sweep.answer import answer_experiment, reused_note
from jacbench.run.sweep.state import UNWRITTEN, SweepState, record_files

_EMPTY = {"job_num": 0, "resumed": False, "stale": ""}  # a job's record from before a column

# Every column may be empty: a sweep's rows may come from any earlier jacbench (resumed).
SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("job_num", pa.int64()),
        pa.field("resumed", pa.bool_()),
        pa.field("stale", pa.string()),
    ]
    + [f.with_nullable(True) for f in SCHEMA]
)


def write_summary(path: Path, rows: Any) -> str:
    """Write the summary parquet; returns why it could not be written ("" when it was)."""
    try:
        write_table(path, rows, SUMMARY_SCHEMA)
        return ""
    except OSError as exc:
        why = exc.strerror or str(exc)
        print(
            f"jacbench: the sweep summary could not be written to {path} ({why}); every job's "
            "row is kept in the results folder (python -m jacbench.report reads them)",
            file=sys.stderr,
        )
        return f"summary not written to {path}: {why}"


def summarise(state: SweepState, console: Any) -> ParentOutcome:
    """Summary parquet, table, answer and report of the sweep; returns what the parent run shows."""
    records = {r["job_num"]: r for r in state.job_records()}
    gone = sorted(n for n, r in records.items() if not all(f.exists() for f in record_files(r)))
    if gone:  # e.g. results/ deleted while the sweep ran: counted without a record
        print(
            f"jacbench: the rows of job(s) {', '.join(map(str, gone))} were recorded and are "
            f"gone from {state.results_dir} (deleted during the sweep?); run the same sweep "
            "again to measure them again",
            file=sys.stderr,
        )
        records = {n: r for n, r in records.items() if n not in gone}
    by_file = {str(f): r for r in records.values() for f in record_files(r)}
    rows = read_files([Path(f) for f in by_file])
    if len(rows):
        for column in ("job_num", "resumed", "stale"):
            rows[column] = [by_file[f].get(column) or _EMPTY[column] for f in rows["_file"]]
        rows = rows.drop(columns="_file").sort_values(["job_num", "started_at"], kind="stable")
        rows = rows.reset_index(drop=True)
    missing = sorted(set(range(state.total)) - set(records))
    summary_path = Path(state.sweep_dir) / "summary.parquet"
    not_written = write_summary(summary_path, rows)
    aside = unwritten_rows(state, records.values())
    untracked = untracked_jobs(records.values())
    counts = {s.value: int((rows["status"] == s).sum()) if len(rows) else 0 for s in Status}
    n_resumed = int(rows["resumed"].sum()) if len(rows) else 0
    n_stale = int((rows["stale"] != "").sum()) if len(rows) else 0
    if records:
        console.print(summary_table(rows, missing))
    failed = counts["failed"] > 0 or bool(missing or not_written or aside or untracked)
    in_rows = f" ({len(rows)} rows)" if len(rows) != len(records) else ""
    console.print(
        f"[bold]{len(records)}/{state.total} jobs recorded[/]{in_rows}: {counts['ok']} ok, "
        f"{counts['failed']} failed, {counts['skipped']} skipped, {n_resumed} already done "
        f"(resumed{f', {n_stale} of them STALE' if n_stale else ''}), {len(missing)} without "
        "a record. " + (f"Summary: {summary_path}" if not not_written else "No summary file.")
    )
    reused = reused_note(rows).strip() if len(rows) else ""
    if reused and not state.analysis:  # a preset's answer says it
        console.print(reused)
    if counts["ok"]:  # one line per problem, as ``python -m jacbench.report`` prints it
        from jacbench.report.console import print_recommendations  # pandas

        print_recommendations(rows, console)
    artifacts = [Path(state.sweep_dir) / "multirun.yaml"]
    artifacts += [summary_path] if not not_written else []
    answer = ""
    if state.analysis and len(rows):
        from jacbench.run.sweep.retiming import side_by_side_lines  # pandas: where it answers

        answer, answered = answer_experiment(state, rows, console, side_by_side_lines(rows))
        failed = failed or not answered
        artifacts.append(Path(state.sweep_dir) / "answer.md")
    images: dict[str, Path] = {}
    job_images: dict[str, Path] = {}
    if state.report and len(rows):
        report_dir = Path(state.sweep_dir) / "report"
        try:
            from jacbench.report import write_report  # matplotlib: only when needed

            write_report(shown_text(rows), report_dir)
            artifacts.append(report_dir)
            console.print(f"Report: {report_dir / 'report.html'}")
            if state.tracking:
                from jacbench.report.job_figures import time_figures

                images = {p.stem: p for p in sorted(report_dir.glob("*.png"))}
                job_images = time_figures(rows, Path(state.sweep_dir) / "job_figures")
        except Exception as exc:  # a report problem must not lose the sweep's records
            console.print(f"[bold yellow]could not write the report: {exc}[/]")
    metrics = {f"n_{k}": float(v) for k, v in counts.items()}
    metrics.update(
        n_jobs=float(state.total),
        n_resumed=float(n_resumed),
        n_stale=float(n_stale),
        n_missing=float(len(missing)),
    )
    outcome = ParentOutcome(
        metrics,
        artifacts=artifacts,
        images=images,
        job_images=job_images,
        failed=failed,
        reason="; ".join(filter(None, [not_written, aside, untracked])),
    )
    if state.tracking and state.parent_run_id and len(rows):
        sweep_line = (
            f"Sweep: `{' '.join(state.overrides) or '(no overrides)'}`: {len(records)}/"
            f"{state.total} jobs recorded{in_rows}, {counts['ok']} ok, {counts['failed']} "
            f"failed, {counts['skipped']} skipped, {len(missing)} without a record."
            + (f" {reused}" if reused else "")
        )
        try:
            from jacbench.report.overview import jobs_table, overview  # matplotlib: lazily

            files = [p.name + ("/report.html" if p.is_dir() else "") for p in artifacts]
            links = artifact_links(state, images)
            view = overview(rows, answer, sweep_line, [*files, "summary_table.json"], links)
            outcome = dataclasses.replace(
                outcome,
                description=view.description,
                tags=view.tags,
                table=jobs_table(rows),
                metrics={**outcome.metrics, **view.metrics},
                answers=view.answers,
            )
        except Exception as exc:  # the parent run is still closed, without the overview
            console.print(f"[bold yellow]could not describe the MLflow parent run: {exc}[/]")
    return outcome


def artifact_links(state: SweepState, images: dict[str, Path]) -> dict[str, str]:
    """The report and each figure's page in MLflow's artifact viewer ({} where none)."""
    from jacbench.record.mlflow_run import Tracking, artifact_hrefs
    from jacbench.report.overview import REPORT

    if not images or not state.tracking:
        return {}
    paths = [REPORT, *(f"report/{p.name}" for p in images.values())]
    return artifact_hrefs(Tracking(**state.tracking), state.parent_run_id, paths)


def unwritten_rows(state: SweepState, records: Iterable[dict[str, Any]]) -> str:
    """Say where the rows the results folder could not take are kept ("" when none)."""
    aside = sorted(
        r["job_num"]
        for r in records
        if any(f.parent == state.folder / UNWRITTEN for f in record_files(r))
    )
    if not aside:
        return ""
    line = (
        f"{len(aside)} row(s) (jobs {', '.join(map(str, aside))}) NOT in {state.results_dir}: "
        f"kept in {state.folder / UNWRITTEN}"
    )
    print(
        f"jacbench: {line}; move them into the results folder once there is room", file=sys.stderr
    )
    return line


def untracked_jobs(records: Iterable[dict[str, Any]]) -> str:
    """Say which jobs have no MLflow run although tracking was on ("" when none)."""
    untracked = sorted(r["job_num"] for r in records if r.get("untracked"))
    if not untracked:
        return ""
    print(
        f"jacbench: {len(untracked)} job(s) ({', '.join(map(str, untracked))}) have no MLflow "
        "run (tracking failed, said above): python -m jacbench.sync logs them once tracking "
        "is back",
        file=sys.stderr,
    )
    return f"{len(untracked)} job(s) without an MLflow run"


def shown_text(rows: Any) -> Any:
    """The rows with their text ``shown`` (escape sequences escaped), for the report."""
    from jacbench.record.text import shown

    out = rows.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, str) and not v.isprintable()).any():
            out[column] = out[column].map(lambda v: shown(v) if isinstance(v, str) else v)
    return out
