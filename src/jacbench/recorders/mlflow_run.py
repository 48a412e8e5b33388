"""MLflow runs: one per job (params, metrics and tags in one batch call), and one parent run
per sweep with the jobs' runs nested under it.

MlflowClient is used directly (no fluent global state), so jobs in worker processes and the
sweep in the launching process each address runs by id.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from jacbench.enums import Status
from jacbench.result import METRIC_COLUMNS, Result

os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
# An unreachable tracking server should cost seconds per job, not minutes of back-off.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")

MAX_PARAM_LEN = 6000
T = TypeVar("T")


@dataclass(frozen=True)
class Tracking:
    """Where runs go: the tracking URI, the experiment, and (for local stores) where the
    artifacts of a newly created experiment live."""

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


def _retry(call: Callable[[], T], attempts: int = 4) -> T:
    """sqlite answers 'database is locked' to concurrent writers now and then: retry."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def _client(tracking: Tracking):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking.uri)


def ensure_experiment(tracking: Tracking) -> str:
    """The experiment's id, creating it (and a fresh sqlite database) if needed."""
    client = _client(tracking)
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


def _flatten(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}", v))
        return out
    return {prefix: str(value)[:MAX_PARAM_LEN]}


def _create_run(tracking: Tracking, name: str, tags: dict[str, str]) -> str:
    client = _client(tracking)
    experiment_id = _retry(lambda: ensure_experiment(tracking))
    run = _retry(lambda: client.create_run(experiment_id, run_name=name, tags=tags))
    return run.info.run_id


def _log_and_close(
    tracking: Tracking,
    run_id: str,
    metrics: dict[str, float],
    params: dict[str, str],
    tags: dict[str, str],
    failed: bool,
) -> None:
    from mlflow.entities import Metric, Param, RunStatus, RunTag

    client = _client(tracking)
    now = int(time.time() * 1000)
    batch_metrics = [Metric(k, v, now, 0) for k, v in metrics.items() if math.isfinite(v)]
    _retry(
        lambda: client.log_batch(
            run_id,
            metrics=batch_metrics,
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items() if v],
        )
    )
    status = RunStatus.to_string(RunStatus.FAILED if failed else RunStatus.FINISHED)
    _retry(lambda: client.set_terminated(run_id, status=status))


def log_result(
    result: Result,
    tracking: Tracking,
    model_options: dict[str, Any],
    strategy_options: dict[str, Any],
    parent_run_id: str = "",
) -> str:
    """Create, fill and close one job's run; returns its id. Raises if tracking fails."""
    run_name = f"{result.strategy}-{result.model}-{result.dtype}-{result.device}"
    tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
    run_id = _create_run(tracking, run_name, tags)
    metrics = {
        name: float(getattr(result, name))
        for name in METRIC_COLUMNS
        if getattr(result, name) is not None
    }
    params = {
        "model": result.model,
        "strategy": result.strategy,
        "dtype": result.dtype,
        "device": result.device,
        "wrt": result.wrt,
        "strategy_kind": result.strategy_kind,
        "config_hash": result.config_hash,
        **({"chosen_strategy": result.chosen_strategy} if result.chosen_strategy else {}),
        **{
            name: str(getattr(result, name))
            for name in ("n_colors", "pattern_density")
            if getattr(result, name) is not None
        },
        **_flatten("model", model_options),
        **_flatten("strategy", strategy_options),
    }
    tags = {
        "status": result.status,
        "error_message": result.error_message[:5000],
        "torch_version": result.torch_version,
        "device_name": result.device_name,
        "threads": str(result.threads),
        "git_commit": result.git_commit,
        "mlflow.source.git.commit": result.git_commit,
        "memory_method": result.memory_method,
        "reference_method": result.reference_method,
        "timing_warning": result.timing_warning,
    }
    _log_and_close(tracking, run_id, metrics, params, tags, failed=result.status == Status.FAILED)
    return run_id


def start_parent_run(tracking: Tracking, name: str, params: dict[str, str]) -> str:
    """The sweep's run, left RUNNING until ``finish_parent_run``."""
    from mlflow.entities import Param

    run_id = _create_run(tracking, name, {"jacbench.role": "sweep"})
    params_list = [Param(k, v[:MAX_PARAM_LEN]) for k, v in params.items()]
    _retry(lambda: _client(tracking).log_batch(run_id, params=params_list))
    return run_id


def finish_parent_run(
    tracking: Tracking,
    run_id: str,
    metrics: dict[str, float],
    artifacts: Iterable[Path],
    failed: bool,
) -> None:
    client = _client(tracking)
    for path in artifacts:
        if path.is_dir():
            _retry(lambda p=path: client.log_artifacts(run_id, str(p), artifact_path=p.name))
        elif path.exists():
            _retry(lambda p=path: client.log_artifact(run_id, str(p)))
    _log_and_close(tracking, run_id, metrics, {}, {}, failed)
