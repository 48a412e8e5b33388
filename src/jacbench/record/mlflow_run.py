"""MLflow runs: one per job (params, metrics and tags in one batch call), nested under one
parent run per sweep. MlflowClient is used directly (no fluent global state): jobs in worker
processes and the sweep in the launching process each address runs by id."""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from jacbench.record.markdown import markdown_safe
from jacbench.record.mlflow_db import open_store
from jacbench.record.result import Result, Round, Status

# MLflow's settings jacbench runs with unless the user set them, set before its first client:
# a tracking server that does not answer is given up after 3 tries of 10 s (docs/mlflow.md).
MLFLOW_DEFAULTS = {
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}

MAX_PARAM_LEN = 6000
T = TypeVar("T")


# Log-scale metrics for MLflow's charts, bars that grow from 0: log10 of microseconds, and of
# rounding units (at least 1: an exact answer is 0), so an outlier does not flatten the rest.
LOG_TIME = "log10_time_us"
LOG_ERROR = "log10_err_eps"
MAX_SECTION_NAME = 200  # MLflow's metric keys hold 250 characters: room for "/log10_time_us"
MAX_KEY = 250  # MLflow's longest metric or param key


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


def mlflow_key(key: str) -> str:
    """``key`` as MLflow takes it: each ``/``-separated part a ``key_part``, at most MAX_KEY."""
    return "/".join(key_part(part) for part in key.split("/"))[:MAX_KEY]


def key_part(text: str) -> str:
    """``text`` as one part of an MLflow key: MLflow's characters only (letters, digits,
    ``_ - . :`` and spaces; anything else, ``/`` too, ``_``), and no ``.`` or ``..`` at its
    start (MLflow refuses a key that ``normpath`` would change): those are ``_`` too."""
    safe = "".join(c if c.isalnum() or c in "_-.: " else "_" for c in text)
    dots = len(safe) - len(safe.lstrip("."))
    return "_" * dots + safe[dots:] or "_"


@dataclass(frozen=True)
class Tracking:
    """Where runs go: URI, experiment, and (local stores) a new experiment's artifact root."""

    uri: str
    experiment: str
    artifact_root: str | None = None

    @classmethod
    def resolve(cls, launch_dir: Path, configured: str | None, experiment: str) -> Tracking:
        """Config, then $MLFLOW_TRACKING_URI, then an absolute sqlite file in the launch
        folder (a relative one would scatter databases if a job changes directory)."""
        uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or ""
        if not uri:
            uri = f"sqlite:///{(launch_dir / 'mlflow.db').resolve()}"
        local = uri.startswith(("sqlite:", "file:", "/"))
        root = (launch_dir / "mlartifacts").resolve().as_uri() if local else None
        return cls(uri, experiment, root)


# What sqlite answers a writer another process got ahead of (a lock it holds, or a row such
# as an experiment tag it inserted between this one's look and insert): retrying waits or updates.
CONCURRENT_WRITER = ("database is locked", "UNIQUE constraint failed")


def _retry(call: Callable[[], T], attempts: int = 4) -> T:
    """Retry a write that another process's write got in the way of (see CONCURRENT_WRITER)."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            if not any(s in str(exc) for s in CONCURRENT_WRITER) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Store:
    """A tracking store opened for one piece of work (a job's run, a sweep's parent)."""

    tracking: Tracking
    client: Any


def connect(tracking: Tracking) -> Store:
    """MLflow's client for ``tracking``, a local database made (atomically) and checked
    first, with jacbench's request defaults where the user set none."""
    from mlflow.tracking import MlflowClient

    for name, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(name, value)
    open_store(tracking.uri, tracking.artifact_root)
    return Store(tracking, MlflowClient(tracking_uri=tracking.uri))


def _experiment_id(store: Store) -> str:
    """The experiment's id, creating it if needed."""
    client, tracking = store.client, store.tracking
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(tracking.experiment, tracking.artifact_root)
    except Exception:  # another process created it first
        experiment = client.get_experiment_by_name(tracking.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


def ensure_experiment(tracking: Tracking) -> str:
    """The experiment's id, creating it (and a fresh sqlite database) if needed."""
    return _retry(lambda: _experiment_id(connect(tracking)))


def _flatten(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}", v))
        return out
    return {prefix: str(value)[:MAX_PARAM_LEN]}


def _create_run(store: Store, name: str, tags: dict[str, str], start_ms: int | None = None) -> str:
    experiment_id = _retry(lambda: _experiment_id(store))
    run = _retry(
        lambda: store.client.create_run(
            experiment_id, start_time=start_ms, run_name=name, tags=tags
        )
    )
    return run.info.run_id


class RunEnd(str, enum.Enum):
    """A run's status as MLflow names it (mlflow.entities is imported late)."""

    RUNNING = "RUNNING"  # not an end: a run still open (or cut short by a kill)
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


def _log_and_close(
    store: Store,
    run_id: str,
    metrics: dict[str, float],
    params: dict[str, str],
    tags: dict[str, str],
    ended: RunEnd,
) -> None:
    """Log in one batch and end the run as ``ended``."""
    from mlflow.entities import Metric, Param, RunTag

    client = store.client
    now = int(time.time() * 1000)
    batch_metrics = [
        Metric(mlflow_key(k), v, now, 0) for k, v in metrics.items() if math.isfinite(v)
    ]
    _retry(
        lambda: client.log_batch(
            run_id,
            metrics=batch_metrics,
            params=[Param(mlflow_key(k), v) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items() if v],
        )
    )
    _retry(lambda: client.set_terminated(run_id, status=ended.value, end_time=now))


# Measurements, the only metrics, in units read at a glance: (metric, Result field, scale).
METRICS: list[tuple[str, str, float]] = [
    ("time_median_ms", "time_median_s", 1e3),
    ("time_iqr_ms", "time_iqr_s", 1e3),
    ("time_ci_low_ms", "time_ci_low_s", 1e3),
    ("time_ci_high_ms", "time_ci_high_s", 1e3),
    ("n_blocks", "n_blocks", 1.0),
    ("cpu_median_ms", "cpu_median_s", 1e3),
    ("n_timed", "n_timed", 1.0),
    ("cpu_wall_ratio", "cpu_wall_ratio", 1.0),
    ("load_avg_1m", "load_avg_1m", 1.0),
    ("first_call_ms", "first_call_s", 1e3),
    ("measure_ms", "measure_s", 1e3),
    ("peak_mem_mib", "peak_mem_bytes", 2.0**-20),
    ("max_abs_err", "max_abs_err", 1.0),
    ("rel_err", "rel_err", 1.0),
    ("err_eps", "err_eps", 1.0),
    ("within_tol", "within_tol", 1.0),
]
# What describes the problem or the setup (constants of a job): params, never metrics.
PARAM_FIELDS = [
    "strategy",
    "model",
    "dtype",
    "device",
    "wrt",
    "n_in",
    "n_out",
    "batch",
    "seed",
    "threads",
    "strategy_kind",
    "strategy_mode",
    "chosen_strategy",
    "decided_by",
    "tier",
    "n_colors",
    "pattern_density",
    "colors_lower_bound",
    "pattern_source",
    "tolerance",
    "reference_method",
    "reference_uncertainty",
    "ref_norm",
    "out_norm",
    "memory_method",
]
JOB_TAG = "jacbench.job_id"  # the row's job_id: which run belongs to which parquet row
SHORT_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}


def metrics_of(result: Result) -> dict[str, float]:
    """``result``'s measurements as MLflow metrics (absent ones left out), with log10 forms for
    the linear charts and the time again under its problem's key (a Chart tab section)."""
    metrics = {
        name: float(getattr(result, column)) * scale
        for name, column, scale in METRICS
        if getattr(result, column) is not None
    }
    if result.rel_err is not None and result.rel_err > 0:
        metrics["log10_rel_err"] = math.log10(result.rel_err)
    if result.err_eps is not None and math.isfinite(result.err_eps):
        metrics[LOG_ERROR] = math.log10(max(result.err_eps, 1.0))
    if result.time_median_s is not None and result.time_median_s > 0:
        metrics[LOG_TIME] = math.log10(result.time_median_s * 1e6)
        section = chart_section(
            result.model, result.n_in, result.n_out, result.dtype, result.device, result.batch
        )
        metrics[f"{section}/{LOG_TIME}"] = metrics[LOG_TIME]
    return {name: significant(value) for name, value in metrics.items()}


def significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: the UI's table cuts long numbers before
    their exponent, so 3.7e-8 would read "3.70650037..." (parquet keeps every digit)."""
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def params_of(
    result: Result, model_options: dict[str, Any], strategy_options: dict[str, Any]
) -> dict[str, str]:
    """Labels, sizes, seeds, threads, tolerance, options; no empty or None (MLflow shows "None")."""
    values: dict[str, Any] = {name: getattr(result, name) for name in PARAM_FIELDS}
    values.update(_flatten("model", model_options))
    values.update(_flatten("strategy", strategy_options))
    texts = {k: f"{v:.4g}" if isinstance(v, float) else str(v) for k, v in values.items()}
    return {k: text for k, text in texts.items() if values[k] not in (None, "", "None")}


def problem_name(result: Result) -> str:
    """The problem in a few words: ``seed004_lm N=84 M=576 float32 cpu``."""
    batch = f" batch={result.batch}" if result.batch > 1 else ""
    wrt = " wrt=params" if result.wrt == "params" else ""
    sizes = f" N={result.n_in} M={result.n_out}" if result.n_in is not None else ""
    return f"{result.model}{sizes}{batch}{wrt} {result.dtype} {result.device}"


def run_name(result: Result) -> str:
    """Short, the distinguishing part first (the runs table cuts names): the strategy (and
    ``side by side`` for a preset's re-timing), then dtype, model and device."""
    device = "" if result.device == "cpu" else f" {result.device}"
    dtype = SHORT_DTYPES.get(result.dtype, result.dtype)
    retimed = " side by side" if result.round == Round.SIDE_BY_SIDE else ""
    name = result.variant or result.strategy
    return capped(f"{name}{retimed} {dtype} {result.model}{device}")


MAX_NAME_LEN = 500  # MLflow refuses longer run and dataset names (and then logs no run)


def capped(name: str) -> str:
    return name if len(name) <= MAX_NAME_LEN else name[: MAX_NAME_LEN - 3] + "..."


def _log_problem(store: Store, run_id: str, result: Result) -> None:
    """The problem as the run's dataset input, so the runs table filters and groups by it."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    profile = {
        "model": result.model,
        "N": result.n_in,
        "M": result.n_out,
        "batch": result.batch,
        "wrt": result.wrt,
        "dtype": result.dtype,
        "device": result.device,
    }
    source = json.dumps({"model_options": result.model_options, "seed": result.seed})
    digest = hashlib.sha256((source + json.dumps(profile)).encode()).hexdigest()[:8]
    dataset = Dataset(
        name=capped(problem_name(result)),
        digest=digest,
        source_type="code",
        source=source,
        profile=json.dumps(profile),
    )
    inputs = [DatasetInput(dataset, [InputTag("mlflow.data.context", "problem")])]
    _retry(lambda: store.client.log_inputs(run_id, datasets=inputs))


def log_result(
    result: Result,
    tracking: Tracking,
    model_options: dict[str, Any],
    strategy_options: dict[str, Any],
    parent_run_id: str = "",
) -> str:
    """Create, fill and close one job's run, spanning the job's start and end; returns its id."""
    tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
    tags[JOB_TAG] = result.job_id  # from its creation: a run cut short is found by job id
    tags[LOGGED_AT_TAG] = f"{time.time():.3f}"
    start_ms = int(result.started_at.timestamp() * 1000)
    store = connect(tracking)
    run_id = _create_run(store, run_name(result), tags, start_ms)
    try:
        _log_problem(store, run_id, result)
        tags = {
            "problem": problem_name(result),
            JOB_TAG: result.job_id,
            "status": result.status,
            "timing_warning": result.timing_warning[:5000],
            "error_message": result.error_message[:5000],
            "mlflow.note.content": markdown_safe(result.error_message[:5000]),
            "torch_version": result.torch_version,
            "device_name": result.device_name,
            "git_commit": result.git_commit,
            "mlflow.source.git.commit": result.git_commit,
            "config_hash": result.config_hash,  # an identifier: a tag, not a param to chart
            # the round, and what made the row: the columns a rerun checks before reusing it
            "round": str(result.round),
            "pair_id": result.pair_id,
            "jacbench_version": result.jacbench_version,
            "code_digest": result.code_digest,
            "hostname": result.hostname,
            "cpu_model": result.cpu_model,
            "allocator": result.allocator,
        }
        params = params_of(result, model_options, strategy_options)
        ended = RunEnd.FAILED if result.status == Status.FAILED else RunEnd.FINISHED
        _log_and_close(store, run_id, metrics_of(result), params, tags, ended)
    except Exception:
        # a run MLflow refused to fill is no run of the row: left RUNNING it would read as
        # one being logged, and the next sync would wait on it instead of logging the row
        with contextlib.suppress(Exception):
            store.client.delete_run(run_id)
        raise
    return run_id


def log_row(result: Result, tracking: Tracking, parent_run_id: str = "") -> str:
    """``log_result`` with the options the row carries (as JSON): what a job records, and
    what ``python -m jacbench.sync`` logs later for a row recorded while tracking was down."""
    model_options = json.loads(result.model_options or "{}")
    strategy_options = json.loads(result.strategy_options or "{}")
    return log_result(result, tracking, model_options, strategy_options, parent_run_id)


CUT_SHORT_S = 120.0  # a job's run still RUNNING this long after its creation was cut short
LOGGED_AT_TAG = "jacbench.logged_at"  # when the run was created (its start is the job's)


class UnsearchableJobId(ValueError):
    """A job id MLflow's search cannot quote (a foreign or hand-edited row)."""


@dataclass(frozen=True)
class JobRuns:
    """What MLflow holds for one job id."""

    closed: str = ""  # the run logged for it, if any
    in_progress: bool = False  # a run being logged right now (by a job or another sync)


def logged_run(tracking: Tracking, job_id: str) -> JobRuns:
    """The run already logged for this job (a job or sync whose write-back failed finds it, not
    logging twice); its runs a kill left RUNNING over CUT_SHORT_S ago are deleted."""
    if not job_id or "'" in job_id or "\\" in job_id:
        raise UnsearchableJobId(f"job_id {job_id!r} cannot be searched for in MLflow")
    client = connect(tracking).client
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is None:
        return JobRuns()
    query = f"tags.`{JOB_TAG}` = '{job_id}'"
    runs = client.search_runs([experiment.experiment_id], query, max_results=50)
    closed = [r.info.run_id for r in runs if r.info.status != RunEnd.RUNNING]
    in_progress = False
    for run in (r for r in runs if r.info.status == RunEnd.RUNNING):
        created = float(run.data.tags.get(LOGGED_AT_TAG) or run.info.start_time / 1e3)
        if time.time() - created < CUT_SHORT_S:
            in_progress = True
        else:
            _retry(functools.partial(client.delete_run, run.info.run_id))
    return JobRuns(closed[0] if closed else "", in_progress and not closed)


EXPERIMENT_NOTE = (
    "jacbench: how fast and how accurate each way of computing a Jacobian is.\n\n"
    "Each sweep is a parent run whose **Overview** gives the recommendation per problem and "
    "links the report; its child runs are the jobs (metrics `time_median_ms` with "
    "`time_ci_low_ms` and `time_ci_high_ms`, `err_eps`, `log10_rel_err`; params `strategy`, "
    "`dtype`, `n_in`, `n_out`; dataset = the problem)."
)
LAYOUT = "workflowType=machine_learning"  # the model-training layout, not the GenAI one


def ui_url(base: str, experiment_id: str, run_id: str = "") -> str:
    """The experiment's runs table, or one run's page, in the model-training layout."""
    run = f"/{run_id}" if run_id else ""
    return f"{base}/#/experiments/{experiment_id}/runs{run}?{LAYOUT}"


def artifact_hrefs(tracking: Tracking, run_id: str, paths: list[str]) -> dict[str, str]:
    """Each of ``paths`` (files of run ``run_id``) as its root-relative link in MLflow's
    artifact viewer; {} where tracking does not answer (the description then has no links)."""
    try:
        experiment = connect(tracking).client.get_run(run_id).info.experiment_id
    except Exception:
        return {}
    base = f"/#/experiments/{experiment}/runs/{run_id}/artifacts"
    return {path: f"{base}/{path}?{LAYOUT}" for path in paths}


def ui_hint(tracking: Tracking, run_id: str) -> str:
    """Where to look in the MLflow UI: the experiment's runs table and ``run_id``'s page (a
    local store needs ``mlflow ui`` first). One URL a line, so terminals link them."""
    experiment_id = connect(tracking).client.get_run(run_id).info.experiment_id
    remote = tracking.uri.startswith(("http:", "https:"))
    base = tracking.uri.rstrip("/") if remote else "http://127.0.0.1:5000"
    first = "MLflow:" if remote else f"MLflow: mlflow ui --backend-store-uri {tracking.uri} , then"
    return (
        f"{first}\n  results table: {ui_url(base, experiment_id)}\n"
        f"  this run:      {ui_url(base, experiment_id, run_id)}"
    )


def describe_experiment(store: Store) -> str:
    """Describe the experiment and ask for the classic model-training layout
    (``mlflow.experimentKind``) unless someone chose otherwise. Returns the experiment's id."""
    client = store.client
    experiment_id = _retry(lambda: _experiment_id(store))
    tags = client.get_experiment(experiment_id).tags
    wanted = {
        "mlflow.note.content": EXPERIMENT_NOTE,
        "mlflow.experimentKind": "custom_model_development",
    }
    for key, value in wanted.items():
        if key not in tags:
            _retry(functools.partial(client.set_experiment_tag, experiment_id, key, value))
    return experiment_id


def start_parent_run(tracking: Tracking, name: str, params: dict[str, str]) -> str:
    """The sweep's run, left RUNNING until ``finish_parent_run``."""
    from mlflow.entities import Param

    store = connect(tracking)
    run_id = _create_run(store, name, {"jacbench.role": "sweep"})
    describe_experiment(store)
    params_list = [Param(k, v[:MAX_PARAM_LEN]) for k, v in params.items()]
    _retry(lambda: store.client.log_batch(run_id, params=params_list))
    return run_id


@dataclass(frozen=True)
class ParentOutcome:
    """What the sweep's run shows once it ends: counts, the answer and files."""

    metrics: dict[str, float]
    description: str = ""  # markdown, shown on the run's Overview
    tags: dict[str, str] = field(default_factory=dict)
    table: Any = None  # a pandas DataFrame logged with log_table (JSON the UI shows)
    artifacts: list[Path] = field(default_factory=list)
    images: dict[str, Path] = field(default_factory=dict)  # key -> PNG, the run's image views
    job_images: dict[str, Path] = field(default_factory=dict)  # job_id -> PNG, on its run
    failed: bool = False
    reason: str = ""  # why the sweep itself failed (e.g. its summary could not be written)
    killed: bool = False  # stopped by Ctrl-C, SIGTERM or SIGHUP: MLflow's KILLED
    # one answer run per problem where there are several ({"name", "metrics", "tags"})
    answers: list[dict] = field(default_factory=list)

    @property
    def ended(self) -> RunEnd:
        return RunEnd.KILLED if self.killed else RunEnd.FAILED if self.failed else RunEnd.FINISHED

    def to_json(self) -> str:
        """Kept beside the sweep's state while its run cannot be closed (tracking down)."""
        table = self.table.to_dict(orient="list") if hasattr(self.table, "to_dict") else self.table
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return json.dumps({**data, "table": table}, default=str)  # paths as text

    @classmethod
    def from_json(cls, text: str) -> ParentOutcome:
        data = json.loads(text)
        data.setdefault("answers", [])  # kept by an earlier jacbench
        data.pop("sections", None)  # the charts' problems an earlier jacbench kept
        data["artifacts"] = [Path(p) for p in data["artifacts"]]
        for name in ("images", "job_images"):
            data[name] = {k: Path(p) for k, p in data[name].items()}
        return cls(**data)


IMAGE_KEY_CHARS = re.compile(r"^[a-zA-Z0-9_\-. ]+$")  # what MLflow allows in an image key
IMAGE_KEY = "time_per_strategy"  # a job run's image: its problem's time figure


def _log_image(store: Store, run_id: str, key: str, path: Path) -> None:
    """A PNG as an MLflow image with a key, shown in the run's image cards. Both files are the
    PNG itself, named as ``MlflowClient.log_image`` names them: its ``+compressed`` copy, the
    one the cards show, is shrunk until a figure's labels cannot be read."""
    if not IMAGE_KEY_CHARS.match(key):
        raise ValueError(f"image key {key!r}: letters, digits, '_-. ' only")
    stem = f"{key}+step+0+timestamp+{int(time.time() * 1000)}+{uuid.uuid4()}"
    with tempfile.TemporaryDirectory() as folder:
        for name in (f"{stem}.png", f"{stem}+compressed.png"):
            shutil.copyfile(path, Path(folder, name))
        _retry(lambda: store.client.log_artifacts(run_id, folder, artifact_path="images"))
    _retry(lambda: store.client.set_tag(run_id, "mlflow.loggedImages", "True"))


def _log_images(store: Store, parent_id: str, outcome: ParentOutcome) -> list[str]:
    """The report's figures on the parent, each problem's on its job runs; returns what failed."""
    left_out = []
    targets = [(parent_id, key, path) for key, path in outcome.images.items()]
    if outcome.job_images:
        query = f"tags.`mlflow.parentRunId` = '{parent_id}'"
        experiment = store.client.get_run(parent_id).info.experiment_id
        children = _retry(lambda: store.client.search_runs([experiment], query, max_results=10000))
        for child in children:
            path = outcome.job_images.get(child.data.tags.get(JOB_TAG, ""))
            if path is not None:
                targets.append((child.info.run_id, IMAGE_KEY, path))
    for run_id, key, path in targets:
        try:
            _log_image(store, run_id, key, path)
        except Exception as exc:
            left_out.append(f"image {key} ({path.name}): {type(exc).__name__}: {exc}")
    return left_out


def _log_answers(store: Store, parent_id: str, outcome: ParentOutcome) -> list[str]:
    """One run per problem under the sweep's run, its answer as metrics in the jobs' columns
    (created last, so the runs table lists them first); returns what could not be logged."""
    left_out = []
    for answer in outcome.answers:
        try:
            tags = {"mlflow.parentRunId": parent_id, "jacbench.role": "answer", **answer["tags"]}
            answer_id = _create_run(store, capped(answer["name"]), tags)
            metrics = {k: significant(v) for k, v in answer["metrics"].items()}
            _log_and_close(store, answer_id, metrics, {}, {}, RunEnd.FINISHED)
        except Exception as exc:
            left_out.append(f"answer run {answer['name']}: {type(exc).__name__}: {exc}")
    return left_out


def finish_parent_run(tracking: Tracking, run_id: str, outcome: ParentOutcome) -> list[str]:
    """Attach the outcome and end the run; files that cannot be logged (a full disk) do not keep
    it open: returns what was left out. Tracking that does not answer raises at once."""
    store = connect(tracking)
    client = store.client
    client.get_run(run_id)  # there, and answering
    left_out = []
    for path in outcome.artifacts:
        try:
            if path.is_dir():
                _retry(functools.partial(client.log_artifacts, run_id, str(path), path.name))
            elif path.exists():
                _retry(functools.partial(client.log_artifact, run_id, str(path)))
        except Exception as exc:
            client.get_run(run_id)  # the file's fault, unless tracking went down meanwhile
            left_out.append(f"{path.name}: {type(exc).__name__}: {exc}")
    left_out += _log_images(store, run_id, outcome)
    if outcome.table is not None and len(outcome.table):
        try:
            _retry(lambda: client.log_table(run_id, outcome.table, "summary_table.json"))
        except Exception as exc:
            left_out.append(f"summary_table.json: {type(exc).__name__}: {exc}")
    left_out += _log_answers(store, run_id, outcome)
    reason = markdown_safe(outcome.reason)  # an exception's text: user input may be in it
    note = f"**{reason}**\n\n{outcome.description}" if outcome.reason else ""
    tags = {
        **outcome.tags,
        "mlflow.note.content": note or outcome.description,
        "error_message": outcome.reason[:5000],
    }
    _log_and_close(store, run_id, outcome.metrics, {}, tags, outcome.ended)
    return left_out
