"""Readable console output of Results (rich tables)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from jacbench.record import variant
from jacbench.record.result import Result, Status
from jacbench.record.text import terminal_text
from jacbench.timing.noise import is_noisy
from jacbench.timing.rule import (
    decimals,
    digits,
    interval_of,
    settled_ratio,
    time_unit,
)

if TYPE_CHECKING:
    import pandas as pd  # a single run prints its table without importing pandas


def missing(value: object) -> bool:
    """None, NaN, or pandas' NA in rows read back from parquet (without importing pandas)."""
    if value is None:
        return True
    try:
        return bool(value != value)  # only NaN differs from itself
    except TypeError:  # pandas' NA: its truth value is ambiguous
        return True


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is a file or pipe."""
    return Console(width=None if sys.stdout.isatty() else 160)


# Keyed by str: a Status is one, and rows read back from parquet hold plain values.
STATUS_STYLE: dict[str, str] = {
    Status.OK: "green",
    Status.FAILED: "bold red",
    Status.SKIPPED: "yellow",
}


def cell(value: object, spec: str) -> str:
    """``value`` formatted, or "-" where it was not measured (None, NaN or pandas NA)."""
    return "-" if missing(value) else format(value, spec)


NOISY = "(noisy)"
NOISY_LEGEND = (
    f"{NOISY}: torch.utils.benchmark found the IQR above 10% of the median; the interval of "
    "the median widens with it, so such a time settles an order only where the intervals are "
    "still apart (docs/columns.md)"
)


def seconds_text(seconds: float) -> str:
    """A time in the tables' unit, three significant digits (``1.07 ms``) as ``Interval.text``."""
    unit, scale = time_unit(seconds)
    return f"{digits(seconds * scale)} {unit}"


def time_text(row: Mapping[str, object]) -> str:
    """The median with its interval (``1.14 ms [1.10-1.20]``), else marked "no interval";
    "(noisy)" where torch.utils.benchmark found the spread too high."""
    interval = interval_of(row)
    if interval is not None:
        text = interval.text()
    elif missing(row.get("time_median_s")):
        return "-"
    else:
        text = f"{seconds_text(float(row['time_median_s']))} (no interval)"  # type: ignore[arg-type]
    return f"{text} {NOISY}" if is_noisy(row.get("timing_warning")) else text


ROUND_COLUMN = "round"
ROUND_NAMES = {"first": "first", "side_by_side": "side by side"}


def round_text(row: Mapping[str, object]) -> str:
    """Which measurement a figure is from: ``first`` or ``side by side`` (a preset's re-timing),
    ``STALE`` where a sweep reused it although what made it changed (reuse_stale=true)."""
    name = str(row.get("round") or "first")
    stale = row.get("stale")
    return ROUND_NAMES.get(name, name) + (" (STALE)" if isinstance(stale, str) and stale else "")


def rounds_differ(rows: pd.DataFrame) -> bool:
    """Whether a table of ``rows`` needs the round column: a side-by-side or stale row."""
    retimed = "round" in rows and (rows["round"].astype(str) == "side_by_side").any()
    stale = "stale" in rows and (rows["stale"].fillna("").astype(str) != "").any()
    return bool(retimed or stale)


UNSETTLED_RATIO = "-"
UNSETTLED_LEGEND = (
    f"{UNSETTLED_RATIO} in a ratio column: the rule does not settle the order (tied, "
    "contended or without an interval: docs/columns.md), so no ratio is quoted"
)


def ratio_text(a: Mapping[str, object], b: Mapping[str, object]) -> str:
    """A's time over B's (``3.7``) where the rule settles their order, else ``UNSETTLED_RATIO``
    (never a verdict word in a number column, nor a ratio of times the rule cannot order)."""
    if a.get("job_id") is not None and a.get("job_id") == b.get("job_id"):
        return "1"  # the same row
    ratio = settled_ratio(a, b)
    return UNSETTLED_RATIO if ratio is None else digits(ratio)


def ratio_phrase(a: Mapping[str, object], b: Mapping[str, object], of: str) -> str:
    """Prose for A's time over B's: ``0.06 x <of>``, or ``not settled against <of>``."""
    ratio = ratio_text(a, b)
    return f"not settled against {of}" if ratio == UNSETTLED_RATIO else f"{ratio} x {of}"


def legend_if_unsettled(lines: list[list[str]], column: int) -> list[str]:
    """``[UNSETTLED_LEGEND]`` where a table's ratio ``column`` shows an unsettled order."""
    return [UNSETTLED_LEGEND] if any(line[column] == UNSETTLED_RATIO for line in lines) else []


def verdict_text(within_tol: object, undecided: object = "") -> str:
    if isinstance(undecided, str) and undecided:
        return "undecided"
    return "-" if missing(within_tol) else ("yes" if within_tol else "NO")


def _in_unit_of(seconds: float | None, reference: float) -> str:
    """``seconds`` in ``reference``'s unit, so that a cell holds one unit."""
    if seconds is None:
        return "-"
    unit, scale = time_unit(reference)
    return f"{seconds * scale:.{decimals(reference * scale)}f} {unit}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _verdict(result: Result) -> str:
    if result.undecided_reason:
        return f"[yellow]undecided[/]: {result.undecided_reason}"
    if result.within_tol is None:
        return "-"
    mark = "[green]yes[/]" if result.within_tol else "[bold red]NO[/]"
    return f"{mark} (tol {cell(result.tolerance, '.1e')})"


def _sparsity(result: Result) -> str:
    if result.n_colors is None:
        return ""
    bound = "" if result.colors_lower_bound is None else f" (bound {result.colors_lower_bound})"
    return (
        f", {result.n_colors} colours{bound}, pattern density "
        f"{cell(result.pattern_density, '.2%')}, pattern {result.pattern_source or '-'}"
    )


def _reference(result: Result) -> str:
    """How the reference was computed, and how far it agrees with an independent one."""
    if not result.reference_method:
        return "-"
    spread = result.reference_uncertainty
    text = result.reference_method
    if spread is None:
        return text + " (no second exact method ran: uncertainty unknown)"
    if result.reference_sample:
        text += f" on {result.reference_sample} sampled entries"
    return text + f" (uncertainty {spread:.1e})"


def _problem(result: Result) -> str:
    """The problem with what is known of it (a job that failed before setup has no shape)."""
    text = terminal_text(result.model) + (f" (wrt {result.wrt})" if result.wrt else "")
    if result.n_in is not None and result.n_out is not None:
        text += f": M={result.n_out} outputs x N={result.n_in} inputs"
    return text + (f", batch {result.batch}" if result.batch and result.batch > 1 else "")


def _strategy(result: Result) -> str:
    how = ", ".join(str(v) for v in (result.strategy_kind, result.strategy_mode) if v)
    tier = f", tier {result.tier} (every move made before timing: the first call includes them)"
    return (
        (result.variant or result.strategy)
        + (f" ({how})" if how else "")
        + (f": chose {result.chosen_strategy}" if result.chosen_strategy else "")
        + (f" ({result.decided_by})" if result.decided_by else "")
        + (tier if result.tier else "")
        + _sparsity(result)
    )


def _measured_rows(result: Result) -> list[tuple[str, str]]:
    """Timing, memory and accuracy: only the lines the job got far enough to measure."""
    rows = []
    if result.time_median_s is not None:
        iqr = _in_unit_of(result.time_iqr_s, result.time_median_s)
        median = f"{time_text(dataclasses.asdict(result))}  (95% interval of the median; IQR {iqr})"
        rows.append(("median time", median))
        if result.timing_warning:  # a line of its own, wrapped: never a 160-column row
            rows.append(("noisy", f"[yellow]{' '.join(result.timing_warning.split())}[/]"))
    if result.n_timed is not None:
        blocks = "" if result.n_blocks is None else f" in {result.n_blocks} blocks"
        rows.append(("timed calls", f"{result.n_timed}{blocks}  ({result.threads} thread(s))"))
    if result.cpu_wall_ratio is not None:
        load = f"1-min load average {cell(result.load_avg_1m, '.2f')}"
        rows.append(("machine load", f"CPU/wall {result.cpu_wall_ratio:.2f} while timing, {load}"))
    if result.first_call_s is not None:
        rows.append(
            ("first call", f"{seconds_text(result.first_call_s)}  (setup + first execution)")
        )
    if result.peak_mem_bytes is not None:
        rows.append(
            ("peak memory", f"{_bytes(result.peak_mem_bytes)}  ({result.memory_method or '-'})")
        )
    if result.rel_err is not None:
        rows += [
            ("max abs error", cell(result.max_abs_err, ".3e")),
            ("rel error", f"{result.rel_err:.3e}  (= {cell(result.err_eps, '.3g')} x machine eps)"),
            ("within tol", _verdict(result)),
        ]
    if result.reference_method:
        rows.append(("reference", _reference(result)))
    return rows


VALUE_WIDTH = 100  # a single run's table: at most ~120 columns whatever a value holds


def result_table(result: Result, with_reason: bool = True) -> Table:
    """One job, one known field per line: what was measured and how far it can be trusted;
    ``with_reason=False`` leaves the failure reason to the caller's own line."""
    table = Table(
        title=f"jacbench: {result.variant or result.strategy} on {terminal_text(result.model)}",
        show_header=False,
    )
    table.add_column("field", style="bold")
    table.add_column("value", max_width=VALUE_WIDTH)  # long values wrap, the table stays narrow
    style = STATUS_STYLE.get(result.status, "")
    named = result.device_name and result.device_name != result.device
    device = result.device + (f" ({result.device_name})" if named else "")
    reason = (
        f": {terminal_text(result.error_message)}" if result.error_message and with_reason else ""
    )
    rows = [
        ("problem", _problem(result)),
        ("strategy", _strategy(result)),
        *([("built", result.built)] if result.built else []),
        ("dtype / device", f"{result.dtype} / {device}"),
        ("status", f"[{style}]{result.status}[/]{reason}"),
        *_measured_rows(result),
        ("config_hash", result.config_hash),
    ]
    if result.mlflow_run_id:
        rows.append(("mlflow run", result.mlflow_run_id))
    for name, value in rows:
        table.add_row(name, value)
    return table


def print_result(result: Result, console: Console | None = None, with_reason: bool = True) -> None:
    (console or make_console()).print(result_table(result, with_reason))


NUMBER_COLUMNS = {"median time [95% interval]", "rel_err", "job"}


def summary_table(rows: pd.DataFrame, missing_jobs: list[int]) -> Table:
    """One line per job of a sweep, read from the recorded rows (never the live objects)."""
    table = Table(title="jacbench sweep summary")
    with_round = rounds_differ(rows)
    for name in (
        "job",
        "strategy",
        "model",
        "dtype",
        "device",
        *([ROUND_COLUMN] if with_round else []),
        "status",
        "median time [95% interval]",
        "rel_err",
        "verdict",
        "note",
    ):
        table.add_column(
            name,
            justify="right" if name in ("job", "rel_err") else "left",
            no_wrap=name in NUMBER_COLUMNS,  # never "942 \nus"
        )
    for _, row in rows.iterrows():
        status = str(row["status"])
        resumed = bool(row.get("resumed"))
        note = "already done (resumed)" if resumed else terminal_text(row["error_message"])
        table.add_row(
            str(row["job_num"]),
            variant.of_row(row),
            terminal_text(row["model"]),
            str(row["dtype"]),
            str(row["device"]),
            *([round_text(row)] if with_round else []),
            f"[{STATUS_STYLE.get(status, '')}]{status}[/]",
            time_text(row),
            cell(row["rel_err"], ".2e"),
            verdict_text(row.get("within_tol"), row.get("undecided_reason")),
            note,
        )
    if "timing_warning" in rows and rows["timing_warning"].map(is_noisy).any():
        table.caption = NOISY_LEGEND
    for num in missing_jobs:
        table.add_row(
            str(num),
            *["?"] * (5 if with_round else 4),
            "[bold red]no record[/]",
            *["-"] * 3,  # time, rel_err, verdict
            "the job did not run, or died before recording",
        )
    return table
