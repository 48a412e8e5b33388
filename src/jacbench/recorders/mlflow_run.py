"""One MLflow run per job: params, metrics and tags in one batch call.

MlflowClient is used directly (no fluent global state), so a runner can nest job runs under
a sweep's parent run later without touching this code.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacbench.result import METRIC_COLUMNS, Result

os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

MAX_PARAM_LEN = 6000


def default_tracking_uri(launch_dir: Path, configured: str | None) -> str:
    """Config, then $MLFLOW_TRACKING_URI, then an absolute sqlite file in the launch folder."""
    if configured:
        return configured
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{(launch_dir / 'mlflow.db').resolve()}"


def _flatten(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}", v))
        return out
    return {prefix: str(value)[:MAX_PARAM_LEN]}


@dataclass(frozen=True)
class RunInfo:
    tracking_uri: str
    experiment: str


def log_result(
    result: Result, info: RunInfo, model_options: dict[str, Any], strategy_options: dict[str, Any]
) -> str:
    """Create, fill and close one run; returns its id. Raises if tracking is unreachable."""
    from mlflow.entities import Metric, Param, RunStatus, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=info.tracking_uri)
    experiment = client.get_experiment_by_name(info.experiment)
    experiment_id = (
        experiment.experiment_id if experiment else client.create_experiment(info.experiment)
    )
    run_name = f"{result.strategy}-{result.model}-{result.dtype}-{result.device}"
    run = client.create_run(experiment_id, run_name=run_name)
    run_id = run.info.run_id

    now = int(time.time() * 1000)
    metrics = []
    for name in METRIC_COLUMNS:
        value = getattr(result, name)
        if value is None:
            continue
        value = float(value)
        if math.isfinite(value):
            metrics.append(Metric(name, value, now, 0))
    params = {
        "model": result.model,
        "strategy": result.strategy,
        "dtype": result.dtype,
        "device": result.device,
        "wrt": result.wrt,
        "strategy_kind": result.strategy_kind,
        "config_hash": result.config_hash,
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
        "reference_kind": result.reference_kind,
    }
    client.log_batch(
        run_id,
        metrics=metrics,
        params=[Param(k, v) for k, v in params.items()],
        tags=[RunTag(k, v) for k, v in tags.items() if v],
    )
    status = RunStatus.FAILED if result.status == "failed" else RunStatus.FINISHED
    client.set_terminated(run_id, status=RunStatus.to_string(status))
    return run_id
