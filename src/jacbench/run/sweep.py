"""Sweeps (``python -m jacbench -m ...``): a parent MLflow run, progress, resume, and a
summary that is written whatever happened to the jobs.

The launching process opens the sweep in a Hydra callback, before any worker starts (so a
fresh sqlite database is created once), and closes it when the launcher returns, also when a
job crashed and Hydra skipped its own end-of-sweep callback. Jobs find the sweep through a
state file in the sweep folder, which works for in-process, joblib and submitit launchers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write
from rich.panel import Panel
from rich.text import Text

from jacbench.core.enums import LauncherKind, Status
from jacbench.record.mlflow_run import (
    ParentOutcome,
    Tracking,
    finish_parent_run,
    start_parent_run,
    ui_hint,
)
from jacbench.record.parquet import read_files, write_atomic, write_table
from jacbench.record.result import SCHEMA
from jacbench.report.display import make_console, summary_table
from jacbench.run.claims import release_sweep
from jacbench.run.inputs import check_sweep, load_analysis, refusing
from jacbench.run.launchers import launcher_kind
from jacbench.run.orphans import watch_loky_workers

STATE_DIR = ".jacbench"
UNWRITTEN = "unwritten"  # rows the results folder could not take, beside the sweep's state
# Set in every job's environment (Hydra's hydra.job.env_set, under every launcher): which
# sweep the job belongs to, so that sweeps sharing a folder never share state.
SWEEP_ENV = "JACBENCH_SWEEP_ID"


def _state_folder(sweep_dir: str | Path, sweep_id: str) -> Path:
    return Path(sweep_dir) / STATE_DIR / sweep_id


def results_dir(cfg: DictConfig, launch_dir: Path) -> Path:
    """The job's results folder (``results_dir``, relative to the launch folder)."""
    path = Path(cfg.results_dir)
    return path if path.is_absolute() else launch_dir / path


def new_sweep_id() -> str:
    """Unique even for sweeps started in the same second: the time, then random digits."""
    return f"{datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@dataclass
class SweepState:
    sweep_id: str
    sweep_dir: str
    total: int
    overrides: list[str]
    tracking: dict[str, Any] | None  # Tracking as a dict; None when MLflow is off
    analysis: str | None = None  # experiments: "module:function" answering from the rows
    report: bool = True  # write the report into the sweep folder and the parent run
    parent_run_id: str = ""
    sweep_pid: int = 0  # the launching process: its worker processes end when it is gone
    results_dir: str = ""  # where its jobs claim and record (claims released if it is stopped)
    finished: bool = False
    exit_code: int = 0

    @property
    def folder(self) -> Path:
        return _state_folder(self.sweep_dir, self.sweep_id)

    def save(self) -> None:
        write_atomic(self.folder / "sweep.json", json.dumps(dataclasses.asdict(self), indent=1))

    @classmethod
    def load(cls, sweep_dir: Path, sweep_id: str) -> SweepState | None:
        path = _state_folder(sweep_dir, sweep_id) / "sweep.json"
        return cls(**json.loads(path.read_text())) if sweep_id and path.is_file() else None

    def mark_job(self, num: int, record: dict[str, Any]) -> int:
        """Record that job ``num`` is done; returns how many jobs are done."""
        jobs = self.folder / "jobs"
        write_atomic(jobs / f"{num}.json", json.dumps(record))
        return len(list(jobs.glob("*.json")))

    def job_records(self) -> list[dict[str, Any]]:
        jobs = self.folder / "jobs"
        return [json.loads(p.read_text()) for p in sorted(jobs.glob("*.json"))]


def count_jobs(config: DictConfig) -> int:
    """How many jobs the basic sweeper makes: its ``params`` (set by experiment presets)
    followed by the command line's overrides, globs expanded, as BasicSweeper does."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = config.hydra.sweeper.get("params") or {}
    overrides = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    loader = GlobalHydra.instance().config_loader()
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))


def sweep_name(swept: list[str], experiment: str | None, jobs: int, when: datetime) -> str:
    """What was swept and when, e.g. ``seed004: model, strategy (24 jobs) 2026-11-22 17:40``."""
    what = ", ".join(swept) or "one job"
    what = f"{experiment}: {what}" if experiment else what
    return f"{what} ({jobs} jobs) {when:%Y-%m-%d %H:%M}"


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys of ``key=value`` overrides that take several values (lists, globs, ranges)."""
    keys = []
    for key, _, value in (o.partition("=") for o in overrides):
        if "," in value or value.startswith(("glob(", "range(", "choice(")):
            keys.append(key.lstrip("+~"))
    return list(dict.fromkeys(keys))


_OPEN: SweepState | None = None  # the sweep opened by this (launching) process


def open_sweep(config: DictConfig) -> SweepState:
    global _OPEN
    with refusing():  # a bad input stops the sweep here, before any job or MLflow run
        jobs = count_jobs(config)
        check_sweep(config, jobs)
    launch_dir = Path.cwd()
    overrides = list(config.hydra.overrides.task)
    sweep_dir = (launch_dir / str(config.hydra.sweep.dir)).resolve()
    state = SweepState(
        new_sweep_id(),
        str(sweep_dir),
        jobs,
        overrides,
        None,
        config.get("analysis"),
        bool(config.get("report", True)),
        sweep_pid=os.getpid(),
        results_dir=str(results_dir(config, launch_dir)),
    )
    console = make_console()
    if config.mlflow.enabled:
        tracking = Tracking.resolve(
            launch_dir, config.mlflow.tracking_uri, config.mlflow.experiment
        )
        state.tracking = dataclasses.asdict(tracking)
        params = {
            "overrides": " ".join(overrides) or "(none)",
            "sweep_dir": str(sweep_dir),
            "total_jobs": str(state.total),
        }
        sweeper_params = config.hydra.sweeper.get("params") or {}
        swept = swept_keys([f"{k}={v}" for k, v in sweeper_params.items()] + overrides)
        experiment = next(
            (o.partition("=")[2] for o in overrides if o.lstrip("+").startswith("experiment=")),
            None,
        )
        name = sweep_name(swept, experiment, state.total, datetime.now())
        try:
            state.parent_run_id = start_parent_run(tracking, name, params)
        except Exception as exc:
            console.print(
                f"[bold yellow]MLflow tracking failed ({tracking.uri}): {exc}; "
                "results still go to parquet[/]"
            )
    state.save()
    tell_jobs(config, state.sweep_id)
    if launcher_kind(config.hydra.launcher) == LauncherKind.JOBLIB:
        watch_loky_workers(state.sweep_pid)
    console.print(
        f"[bold]jacbench sweep[/]: {state.total} jobs, folder {sweep_dir}"
        + (f", MLflow parent run {state.parent_run_id}" if state.parent_run_id else "")
    )
    _OPEN = state
    return state


def tell_jobs(config: DictConfig, sweep_id: str) -> None:
    """Every job of this sweep gets ``sweep_id`` in its environment: the launcher composes
    each job's config from these overrides, so this reaches in-process, joblib and SLURM
    jobs alike (an environment variable of this process would miss reused joblib workers)."""
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.overrides.hydra.append(f"++hydra.job.env_set.{SWEEP_ENV}={sweep_id}")


def current_sweep() -> SweepState | None:
    """Inside a job of a multirun: its sweep (None if the sweep was not opened)."""
    hydra_cfg = HydraConfig.get()
    sweep_dir = (Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir).resolve()
    return SweepState.load(sweep_dir, os.environ.get(SWEEP_ENV, ""))


SUMMARY_SCHEMA = pa.schema(
    [pa.field("job_num", pa.int64()), pa.field("resumed", pa.bool_()), *SCHEMA]
)


def close_sweep(state: SweepState, stopped_by: str = "") -> int:
    """Summary parquet and table, parent run closed; returns the sweep's exit code
    (1 when a job failed or left no record, or the summary could not be written). The
    parent run is closed whatever happens here (FAILED, with the reason, if this fails;
    KILLED, with its claims released, when ``stopped_by`` a signal). Safe to call twice."""
    if state.finished:
        return state.exit_code
    console = make_console()
    outcome = ParentOutcome({}, failed=True, reason="the sweep's summary failed")
    if stopped_by and state.results_dir:  # its workers were stopped with it
        release_sweep(Path(state.results_dir), state.sweep_id)
    try:
        outcome = summarise(state, console)
        if stopped_by:
            why = f"stopped by {stopped_by}: run the same sweep again to resume"
            outcome = dataclasses.replace(outcome, killed=True, reason=why)
    except BaseException as exc:
        reason = " ".join(str(exc).split())[:300]
        outcome = dataclasses.replace(outcome, reason=f"{type(exc).__name__}: {reason}")
        raise
    finally:
        close_parent(state, outcome, console)
        state.finished, state.exit_code = True, int(outcome.failed)
        with contextlib.suppress(OSError):  # a full disk: this process knows it is closed
            state.save()
    return state.exit_code


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
    """Collect the jobs' rows, write the summary (and answer, report), print the table;
    returns what the parent run shows."""
    records = {r["job_num"]: r for r in state.job_records()}
    gone = sorted(n for n, r in records.items() if not Path(r["result_file"]).exists())
    if gone:  # e.g. results/ deleted while the sweep ran: counted without a record
        print(
            f"jacbench: the rows of job(s) {', '.join(map(str, gone))} were recorded and are "
            f"gone from {state.results_dir} (deleted during the sweep?); run the same sweep "
            "again to measure them again",
            file=sys.stderr,
        )
        records = {n: r for n, r in records.items() if n not in gone}
    rows = read_files([Path(r["result_file"]) for r in records.values()])
    if len(rows):
        by_file = {r["result_file"]: r for r in records.values()}
        rows["job_num"] = [by_file[f]["job_num"] for f in rows["_file"]]
        rows["resumed"] = [by_file[f]["resumed"] for f in rows["_file"]]
        rows = rows.drop(columns="_file").sort_values("job_num").reset_index(drop=True)
    missing = sorted(set(range(state.total)) - set(records))
    summary_path = Path(state.sweep_dir) / "summary.parquet"
    not_written = write_summary(summary_path, rows)
    aside = unwritten_rows(state, records.values())
    untracked = untracked_jobs(records.values())
    counts = {s.value: int((rows["status"] == s).sum()) if len(rows) else 0 for s in Status}
    n_resumed = int(rows["resumed"].sum()) if len(rows) else 0
    if records:
        console.print(summary_table(rows, missing))
    failed = counts["failed"] > 0 or bool(missing or not_written or aside or untracked)
    console.print(
        f"[bold]{len(rows)}/{state.total} jobs recorded[/]: {counts['ok']} ok, "
        f"{counts['failed']} failed, {counts['skipped']} skipped, {n_resumed} already done "
        f"(resumed), {len(missing)} without a record. "
        + (f"Summary: {summary_path}" if not not_written else "No summary file.")
    )
    if counts["ok"]:
        print_recommendations(rows, console)
    artifacts = [Path(state.sweep_dir) / "multirun.yaml"]
    artifacts += [summary_path] if not not_written else []
    answer = ""
    if state.analysis and len(rows):
        from jacbench.core.registry import load_registry  # torch: only where a preset answers
        from jacbench.run.side_by_side import retime_top

        rows, retimed = retime_top(rows, load_registry())
        answer, answered = answer_experiment(state, rows, console, retimed)
        failed = failed or not answered
        artifacts.append(Path(state.sweep_dir) / "answer.md")
    images: dict[str, Path] = {}
    job_images: dict[str, Path] = {}
    if state.report and len(rows):
        report_dir = Path(state.sweep_dir) / "report"
        try:
            from jacbench.report import write_report  # matplotlib: only when needed

            write_report(rows, report_dir)
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
        n_jobs=float(state.total), n_resumed=float(n_resumed), n_missing=float(len(missing))
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
            f"Sweep: `{' '.join(state.overrides) or '(no overrides)'}`: {len(rows)}/"
            f"{state.total} jobs recorded, {counts['ok']} ok, {counts['failed']} failed, "
            f"{counts['skipped']} skipped, {len(missing)} without a record."
        )
        try:
            from jacbench.report.overview import jobs_table, overview  # matplotlib: lazily

            files = [p.name + ("/report.html" if p.is_dir() else "") for p in artifacts]
            view = overview(rows, answer, sweep_line, [*files, "summary_table.json"])
            outcome = dataclasses.replace(
                outcome, description=view.description, tags=view.tags, table=jobs_table(rows)
            )
        except Exception as exc:  # the parent run is still closed, without the overview
            console.print(f"[bold yellow]could not describe the MLflow parent run: {exc}[/]")
    return outcome


def unwritten_rows(state: SweepState, records: Iterable[dict[str, Any]]) -> str:
    """Say where the rows the results folder could not take are kept ("" when none)."""
    aside = sorted(
        r["job_num"] for r in records if Path(r["result_file"]).parent == state.folder / UNWRITTEN
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


def print_recommendations(rows: Any, console: Any) -> None:
    """Every sweep ends with its recommendation, one line per problem, as the report and the
    MLflow parent give it."""
    from jacbench.report.analysis import recommend  # pandas: once the jobs are done
    from jacbench.report.problems import normalise, problems

    labelled, _ = normalise(rows)
    for title, group in problems(labelled):
        sentence = recommend(title, group).sentence().replace("**", "")
        console.print(Text(f"Recommended: {sentence}"))


def close_parent(state: SweepState, outcome: ParentOutcome, console: Any) -> None:
    """End the sweep's MLflow run (FINISHED, or FAILED with the outcome's reason)."""
    if not (state.tracking and state.parent_run_id):
        return
    tracking = Tracking(**state.tracking)
    try:
        for what in finish_parent_run(tracking, state.parent_run_id, outcome):
            console.print(f"[bold yellow]not attached to the MLflow parent run: {what}[/]")
        console.print(ui_hint(tracking, state.parent_run_id), soft_wrap=True)
    except Exception as exc:
        console.print(f"[bold yellow]could not close MLflow parent run: {exc}[/]")


def reused_note(rows: Any) -> str:
    """The rows the answer reused from an earlier command (resume), with when each was
    measured: their times were taken under that command's machine load, not this one's."""
    if "resumed" not in rows or not rows["resumed"].any():
        return ""
    reused = rows[rows["resumed"].astype(bool)]
    when = [
        f"{r['strategy']} {r['dtype']} ({r['model']}): measured "
        f"{r['started_at']:%Y-%m-%d %H:%M} UTC"
        for _, r in reused.iterrows()
    ]
    return (
        f"\n\nReused from earlier commands ({len(when)} row(s), timed under that load, not "
        "this sweep's; run with force=true to measure them again): " + "; ".join(when) + "."
    )


def answer_experiment(
    state: SweepState, rows: Any, console: Any, retimed: list[str] | None = None
) -> tuple[str, bool]:
    """Run the experiment's analysis on the recorded rows (the top candidates re-timed side
    by side, ``retimed`` saying which); print it and save it as answer.md (a fenced block, so
    markdown viewers keep its columns); returns the answer and whether the analysis gave one."""
    path = Path(state.sweep_dir) / "answer.md"
    try:
        answer = load_analysis(str(state.analysis))(rows)
        answered = isinstance(answer, str)
    except Exception as exc:
        answer = f"The analysis {state.analysis} could not answer: {type(exc).__name__}: {exc}"
        answered = False
        print(f"jacbench: {' '.join(answer.split())[:300]}", file=sys.stderr)
    if not isinstance(answer, str):
        answer = (
            f"The analysis {state.analysis} returned a {type(answer).__name__}, not the text "
            "of an answer: an analysis takes the sweep's rows and returns a str"
        )
        print(f"jacbench: {answer}", file=sys.stderr)
    answer = answer.rstrip() + reused_note(rows)
    if retimed:
        answer += "\n\nTimed again side by side before naming a winner:\n" + "\n".join(
            f"- {line}" for line in retimed
        )
    console.print(Panel(Text(answer), title="answer", expand=False))
    title = f"# Answer: {str(state.analysis).partition(':')[0].rpartition('.')[2]}"
    try:
        write_atomic(path, f"{title}\n\n```text\n{answer.rstrip()}\n```\n")
    except OSError as exc:  # e.g. a full disk: the answer is on screen and in the parent run
        print(f"jacbench: could not write {path} ({exc.strerror or exc})", file=sys.stderr)
    return answer, answered


def launching_sweep() -> SweepState | None:
    """In the launching process, between the sweep's start and end: the sweep it opened."""
    return _OPEN


def close_open_sweep(stopped_by: str = "") -> int:
    """Close the sweep this process opened, if any, and forget it (a later launch in the same
    process starts afresh); returns its exit code."""
    global _OPEN
    state, _OPEN = _OPEN, None  # a later launch in this process starts afresh
    return close_sweep(state, stopped_by) if state is not None else 0


class SweepCallback(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        open_sweep(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if _OPEN is not None:  # closed here; jacbench's main then reads its exit code
            close_sweep(_OPEN)


def job_record(
    num: int, result_file: Path, status: str, resumed: bool, untracked: bool = False
) -> dict[str, Any]:
    return {
        "job_num": num,
        "result_file": str(result_file),
        "status": status,
        "resumed": resumed,
        "untracked": untracked,  # tracking was on and failed: the sweep exits 1
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "pid": os.getpid(),
    }
