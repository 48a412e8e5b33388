"""jacbench's saved view of the MLflow runs table: columns a reviewer needs first, and charts.

MLflow 3's UI (read in its 3.17 bundle) keeps saved views as experiment tags
``mlflow.sharedViewState.<key>`` holding an envelope ``{name, createdAt, updatedAt, state}``
(``state``: the view's JSON as a string). With the envelope the view is listed in the Views
menu and opened by ``?viewStateShareKey=<key>``; the UI reads only known keys of the state
(columns, widths, expanded runs, chart cards and sections...). Chart cards are the UI's own
card configs: BAR (one metric per run), SCATTER (two metrics), IMAGE (images logged with a
key, ``MlflowClient.log_image(..., key=)``).
"""

from __future__ import annotations

import hashlib
import json
import time

VIEW_KEY = "jacbench"  # the runs table, answer first
VIEW_NAME = "jacbench: answer first"
CHARTS_KEY = "jacbench-charts"  # the jobs' charts
CHARTS_NAME = "jacbench: charts of the jobs"
TAG_PREFIX = "mlflow.sharedViewState."
# The UI drops a shared view's expanded runs (3.17 strips runsExpanded on read), and charts
# show only the runs listed, so a sweep's jobs stay out of charts under a collapsed parent:
# the charts' view lists the job runs alone (they carry the job tag), fastest first.
JOB_RUNS = "tags.`jacbench.job_id` LIKE '%'"
# The runs table's columns in that view (MLflow's keys: type.`name`), in reading order: the
# answer (a sweep's parent), the problem, the time with its interval, the error, the verdict.
VIEW_COLUMNS = [
    "tags.`recommended_strategy`",  # the parent run's tags (jacbench.report.overview)
    "metrics.`time_median_ms`",  # with its interval beside it
    "metrics.`time_ci_low_ms`",
    "metrics.`time_ci_high_ms`",
    "metrics.`err_eps`",
    "metrics.`within_tol`",
    "metrics.`speedup_vs_functional`",  # a sweep's answer (its parent or answer runs)
    "attributes.`Dataset`",  # the problem (also in the run's name)
    "metrics.`exact`",
    "params.`dtype`",
    "metrics.`log10_rel_err`",
    "params.`strategy`",
    "params.`n_in`",
    "params.`n_out`",
]
RUN_NAME = "attributes.`Run Name`"
# Wide enough for each header with its unit ("time_median_ms") and the values below it, and
# narrow enough that the answer's columns (to within_tol) fit a 1440 px wide screen.
WIDTHS = {
    RUN_NAME: 250,
    "attributes.`Dataset`": 170,
    "tags.`recommended_strategy`": 178,
    "params.`dtype`": 75,
    "metrics.`time_median_ms`": 128,
    "metrics.`time_ci_low_ms`": 118,
    "metrics.`time_ci_high_ms`": 128,
    "metrics.`err_eps`": 78,
    "metrics.`within_tol`": 88,
}
METRIC_WIDTH = 135
IMAGE_KEY = "time_per_strategy"  # the figure logged as an image on parent and job runs
MAX_RUNS = 100  # runs a chart compares (MLflow's default, 10, hid 7 of 16 jobs)


def _card(kind: str, title: str, section: str, index: int, **fields: object) -> dict:
    return {
        "uuid": f"jacbench-chart-{index:03d}",  # MLflow orders cards (and sections) by it
        "type": kind,
        "displayName": title,
        "metricSectionId": section,
        "deleted": False,
        "isGenerated": False,
        "runsCountToCompare": MAX_RUNS,
        **fields,
    }


# Log-scale metrics for MLflow's charts, which draw linear axes only: a bar grows with the
# time (log10 of microseconds: 1 us is 0) and with the error (log10 of rounding units, at
# least 1 unit: an exact answer is 0), so one 145 ms outlier no longer flattens the rest and
# no bar grows leftward from zero.
LOG_TIME = "log10_time_us"
LOG_ERROR = "log10_err_eps"
MAX_SECTIONS = 12  # a chart section per problem up to this many problems (the map has 150)
MAX_SECTION_NAME = 200  # MLflow's metric keys hold 250 characters: room for "/log10_time_us"


def chart_section(
    model: str, n_in: object, n_out: object, dtype: str, device: str, batch: object = 1
) -> str:
    """A problem's name in metric keys (``<section>/log10_time_us``): MLflow allows letters,
    digits, ``_ - . / :`` and spaces in a key, so sizes read ``N84 M576``; a key holds at
    most 250 characters, so a long name keeps its start and a digest of the whole."""
    sizes = f" N{n_in} M{n_out}" if n_in is not None else ""
    many = f" B{batch}" if batch not in (None, 1) else ""
    name = f"{model}{sizes}{many} {dtype} {device}"
    if len(name) > MAX_SECTION_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[: MAX_SECTION_NAME - 12]}.. {digest}"
    return key_part(name)


MAX_KEY = 250  # MLflow's longest metric or param key


def mlflow_key(key: str) -> str:
    """``key`` as MLflow takes it: each ``/``-separated part a ``key_part``, at most MAX_KEY."""
    return "/".join(key_part(part) for part in key.split("/"))[:MAX_KEY]


def key_part(text: str) -> str:
    """``text`` as one part of an MLflow key (a metric's, a param's): MLflow's characters
    only (letters, digits, ``_ - . :`` and spaces; anything else ``_``, ``/`` too),
    and never a path that resolves elsewhere (MLflow refuses a key that ``normpath`` would
    change: ``..`` or ``.`` at a part's start are ``_``)."""
    safe = "".join(c if c.isalnum() or c in "_-.: " else "_" for c in text)
    dots = len(safe) - len(safe.lstrip("."))
    return "_" * dots + safe[dots:] or "_"


def charts(section: str) -> list[dict]:
    """Time per run (bar, log10 us), time against error (scatter, both log10), error per run
    (bar, log10 rounding units), and the time figure."""
    metric = {"type": "METRIC"}
    first = 100  # after the problems' cards (at most MAX_SECTIONS)
    return [
        _card("BAR", "log10 time per Jacobian [us]", section, first, metricKey=LOG_TIME),
        _card(
            "SCATTER",
            "log10 time [us] against log10 error [eps]",
            section,
            first + 1,
            xaxis={"key": LOG_ERROR, **metric},
            yaxis={"key": LOG_TIME, **metric},
        ),
        _card("BAR", "log10 error [rounding units]", section, first + 2, metricKey=LOG_ERROR),
        _card(
            "IMAGE", "time per strategy (report figure)", section, first + 3, imageKeys=[IMAGE_KEY]
        ),
    ]


def _section(uuid: str, name: str, display: bool = True, layout: dict | None = None) -> dict:
    """A charts section; ``layout``: MLflow's ``columns`` (cards a row, 3 by default) and
    ``cardHeight`` (px, 360 by default)."""
    return {
        "uuid": uuid,
        "name": name,
        "display": display,  # False: collapsed (its header shown, its charts folded)
        "isReordered": False,
        "deleted": False,
        "isGenerated": False,
        **(layout or {}),
    }


# A problem's time bars: one card a row, the page's width, and tall enough for a preset's
# two dozen jobs to a bar each with its value written in it (MLflow's default, a third of
# the width and 360 px, leaves them too thin to read). The legend under the bars is MLflow's
# own box of two lines that scrolls: no view setting makes it taller.
PROBLEM_CARD = {"columns": 1, "cardHeight": 720}


def problem_charts(problems: list[str]) -> tuple[list[dict], list[dict]]:
    """(cards, sections): one section per problem, its time bars alone (each job logs its
    time under its problem's key too, ``<section>/log10_time_us``, so a card shows only
    that problem's jobs)."""
    cards, sections = [], []
    for i, problem in enumerate(problems):
        uuid = f"jacbench-0-problem-{i:03d}"  # MLflow lists sections by uuid: problems first
        sections.append(_section(uuid, problem, layout=PROBLEM_CARD))
        key = f"{problem}/{LOG_TIME}"
        cards.append(_card("BAR", f"{problem}: log10 time [us]", uuid, i, metricKey=key))
    return cards, sections


def _widths() -> dict[str, int]:
    return {c: METRIC_WIDTH for c in VIEW_COLUMNS if c.startswith("metrics.")} | WIDTHS


def view_state() -> dict:
    """The runs table: the answer's columns first, every run listed (MLflow's default hid
    all but the first 10). Not sorted by time: sorted by a metric, MLflow 3.17 lists every
    run flat, the sweep's run (and its answer) last; its charts view lists the jobs fastest
    first (``charts_state``)."""
    return {
        "selectedColumns": VIEW_COLUMNS,
        # MLflow applies widths only along a column order: run name first.
        "columnOrder": [RUN_NAME, *VIEW_COLUMNS],
        "columnWidths": _widths(),
        "runsHiddenMode": "SHOW_ALL",
        "runListHidden": False,
    }


def charts_state(problems: list[str] | None = None, parent_run_id: str = "") -> dict:
    """The job runs (of the sweep ``parent_run_id`` where given), fastest first, with
    jacbench's charts, and a section per problem where ``problems`` are at most
    MAX_SECTIONS."""
    section = "jacbench-charts"
    cards, sections = charts(section), [_section(section, "all jobs")]
    if problems and len(problems) <= MAX_SECTIONS:
        per_problem = problem_charts(problems)
        # MLflow 3.17 lists the all-jobs section first whatever the order: collapsed, it
        # leaves the first screen to the problems' own sections
        sections = [*per_problem[1], _section(section, "all jobs", display=False)]
        cards = [*per_problem[0], *cards]
    search = JOB_RUNS
    if parent_run_id:
        search += f" AND tags.`mlflow.parentRunId` = '{parent_run_id}'"
    return {
        **view_state(),
        "searchFilter": search,
        "orderByKey": "metrics.`time_median_ms`",
        "orderByAsc": True,
        "compareRunCharts": cards,
        "compareRunSections": sections,
        "hideEmptyCharts": True,
    }


VIEWS = {VIEW_KEY: (VIEW_NAME, view_state), CHARTS_KEY: (CHARTS_NAME, charts_state)}


def view_tag(key: str, created_ms: int | None = None, state: dict | None = None) -> str:
    """The saved view ``key``'s tag value: MLflow's envelope around its state (``state``:
    another than the view's default, e.g. the charts of one sweep)."""
    name, default = VIEWS[key]
    now = int(time.time() * 1000)
    envelope = {
        "name": name,
        "createdAt": created_ms or now,
        "updatedAt": now,
        "state": json.dumps(state if state is not None else default()),
    }
    return json.dumps(envelope)


def read_view(value: str) -> dict:
    """The state of a saved view's tag value (envelope, or a bare state written before)."""
    data = json.loads(value)
    return json.loads(data["state"]) if "state" in data else data


def current(key: str, value: str | None) -> bool:
    """Whether a saved view's tag value already holds this version's view."""
    return value is not None and read_view(value) == VIEWS[key][1]()
