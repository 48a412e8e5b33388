"""``python -m jacbench``: the Hydra entry point for one job (and for sweeps with ``-m``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console

from jacbench.config import conf_dir, register_configs
from jacbench.display import print_result
from jacbench.recorders.mlflow_run import RunInfo, default_tracking_uri, log_result
from jacbench.recorders.parquet import write_result
from jacbench.registry import load_registry
from jacbench.result import Result
from jacbench.runner import execute

log = logging.getLogger("jacbench")
REGISTRY = load_registry()
register_configs(REGISTRY)


def record(result: Result, cfg: DictConfig, launch_dir: Path, console: Console) -> Result:
    """MLflow first (to learn the run id), then the parquet row, which is written even when
    tracking is down."""
    run_id = ""
    if cfg.mlflow.enabled:
        info = RunInfo(
            default_tracking_uri(launch_dir, cfg.mlflow.tracking_uri), cfg.mlflow.experiment
        )
        try:
            run_id = log_result(
                result, info, json.loads(result.model_options), json.loads(result.strategy_options)
            )
        except Exception as exc:
            console.print(
                f"[bold yellow]MLflow tracking failed ({info.tracking_uri}): "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                "the parquet row is still written (mlflow_run_id empty)[/]"
            )
    result = dataclasses.replace(result, mlflow_run_id=run_id)
    results_dir = Path(cfg.results_dir)
    path = write_result(
        result, results_dir if results_dir.is_absolute() else launch_dir / results_dir
    )
    log.info("recorded %s (%s) in %s", result.job_id, result.status, path)
    return result


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def run(cfg: DictConfig) -> None:
    console = Console()
    for problem in REGISTRY.problems():
        log.warning(problem)
    launch_dir = Path(HydraConfig.get().runtime.cwd)
    result = record(execute(cfg, REGISTRY), cfg, launch_dir, console)
    print_result(result, console)
    if HydraConfig.get().mode == RunMode.RUN and not result.ok:
        print(f"jacbench: {result.status}: {result.error_message}", file=sys.stderr)
        raise SystemExit(1)


def main() -> None:
    run()


if __name__ == "__main__":
    main()
