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
    "attributes.`Dataset`",
    "params.`dtype`",
    "metrics.`time_median_ms`",
    "metrics.`err_eps`",
    "metrics.`within_tol`",
    "metrics.`time_ci_low_ms`",
    "metrics.`time_ci_high_ms`",
    "tags.`speedup_vs_functional`",
    "metrics.`log10_rel_err`",
    "params.`strategy`",
    "params.`n_in`",
    "params.`n_out`",
]
RUN_NAME = "attributes.`Run Name`"
# Wide enough for each header with its unit ("time_median_ms") and the values below it, and
# narrow enough that the answer's columns (to within_tol) fit a 1440 px wide screen.
WIDTHS = {
    RUN_NAME: 190,
    "attributes.`Dataset`": 170,
    "tags.`recommended_strategy`": 185,
    "params.`dtype`": 80,
    "metrics.`err_eps`": 90,
    "metrics.`within_tol`": 100,
}
METRIC_WIDTH = 135
IMAGE_KEY = "time_per_strategy"  # the figure logged as an image on parent and job runs
MAX_RUNS = 100  # runs a chart compares (MLflow's default, 10, hid 7 of 16 jobs)


def _card(kind: str, title: str, section: str, index: int, **fields: object) -> dict:
    return {
        "uuid": f"jacbench-chart-{index}",
        "type": kind,
        "displayName": title,
        "metricSectionId": section,
        "deleted": False,
        "isGenerated": False,
        "runsCountToCompare": MAX_RUNS,
        **fields,
    }


def charts(section: str) -> list[dict]:
    """Time per run (bar), time against log10 error (scatter), log10 error per run (bar:
    err_eps would put every exact method at 0 on a linear axis), and the time figure."""
    metric = {"type": "METRIC"}
    return [
        _card("BAR", "time per Jacobian [ms]", section, 0, metricKey="time_median_ms"),
        _card(
            "SCATTER",
            "time [ms] against log10 relative error",
            section,
            1,
            xaxis={"key": "log10_rel_err", **metric},
            yaxis={"key": "time_median_ms", **metric},
        ),
        _card("BAR", "log10 relative error", section, 2, metricKey="log10_rel_err"),
        _card("IMAGE", "time per strategy (report figure)", section, 3, imageKeys=[IMAGE_KEY]),
    ]


def _widths() -> dict[str, int]:
    return {c: METRIC_WIDTH for c in VIEW_COLUMNS if c.startswith("metrics.")} | WIDTHS


def view_state() -> dict:
    """The runs table: the answer's columns first, every run listed (MLflow's default hid
    all but the first 10)."""
    return {
        "selectedColumns": VIEW_COLUMNS,
        # MLflow applies widths only along a column order: run name first.
        "columnOrder": [RUN_NAME, *VIEW_COLUMNS],
        "columnWidths": _widths(),
        "runsHiddenMode": "SHOW_ALL",
        "runListHidden": False,
    }


def charts_state() -> dict:
    """The job runs, fastest first, with jacbench's charts."""
    section = "jacbench-charts"
    return {
        **view_state(),
        "searchFilter": JOB_RUNS,
        "orderByKey": "metrics.`time_median_ms`",
        "orderByAsc": True,
        "compareRunCharts": charts(section),
        "compareRunSections": [
            {
                "uuid": section,
                "name": "jacbench",
                "display": True,
                "isReordered": False,
                "deleted": False,
                "isGenerated": False,
            }
        ],
        "hideEmptyCharts": True,
    }


VIEWS = {VIEW_KEY: (VIEW_NAME, view_state), CHARTS_KEY: (CHARTS_NAME, charts_state)}


def view_tag(key: str, created_ms: int | None = None) -> str:
    """The saved view ``key``'s tag value: MLflow's envelope around its state."""
    name, state = VIEWS[key]
    now = int(time.time() * 1000)
    envelope = {
        "name": name,
        "createdAt": created_ms or now,
        "updatedAt": now,
        "state": json.dumps(state()),
    }
    return json.dumps(envelope)


def read_view(value: str) -> dict:
    """The state of a saved view's tag value (envelope, or a bare state written before)."""
    data = json.loads(value)
    return json.loads(data["state"]) if "state" in data else data


def current(key: str, value: str | None) -> bool:
    """Whether a saved view's tag value already holds this version's view."""
    return value is not None and read_view(value) == VIEWS[key][1]()
