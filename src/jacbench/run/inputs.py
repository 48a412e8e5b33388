"""Checks of the inputs that concern a whole launch (where results go, the launcher, the
experiment's analysis), made before anything is measured so that a bad one costs nothing."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jacbench.core.enums import LauncherKind
from jacbench.core.errors import ConfigError, LaunchRefused
from jacbench.run.launchers import launcher_kind

EXAMPLE_ANALYSIS = "jacbench.experiments.seed001:answer"


def check_results_dir(value: object) -> None:
    """An empty ``results_dir=`` would scatter parquet files into the launch folder."""
    if value is None or not str(value).strip():
        raise ConfigError(
            f"results_dir={value or ''!s} is empty; give a folder for the parquet files "
            "(default: results; relative paths are under the launch folder)"
        )
    # Found now, not after every job has been measured; nothing is created here.
    folder = Path(str(value)).absolute()  # relative to the launch folder (the working dir)
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    problem = (
        f"{existing} is not a folder"
        if not existing.is_dir()
        else f"{existing} is not writable"
        if not os.access(existing, os.W_OK | os.X_OK)
        else ""
    )
    if problem:
        raise ConfigError(
            f"results_dir={value}: cannot write result files there ({problem}); "
            "give a folder you can write to"
        )


def check_launcher(launcher: Any) -> None:
    """Settings the launcher would reject only after the sweep has started."""
    n_jobs = launcher.get("n_jobs") if launcher_kind(launcher) == LauncherKind.JOBLIB else None
    if n_jobs is not None and (not isinstance(n_jobs, int) or n_jobs == 0):
        raise ConfigError(
            f"hydra.launcher.n_jobs={n_jobs} is not a number of worker processes; use a "
            "positive number, or -1 for one per core"
        )


def load_analysis(spec: str) -> Callable[..., str]:
    """The experiment's ``module:function`` (function defaults to ``answer``), imported."""
    module_name, _, function = spec.partition(":")
    usage = f"analysis must be 'module:function', e.g. analysis={EXAMPLE_ANALYSIS}"
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            f"analysis={spec}: cannot import module {module_name!r} "
            f"({type(exc).__name__}: {exc}); {usage}"
        ) from None
    fn = getattr(module, function or "answer", None)
    if not callable(fn):
        raise ConfigError(
            f"analysis={spec}: module {module_name!r} has no function {function or 'answer'!r}; "
            f"{usage}"
        )
    return fn


TRACKING_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "mssql")
MAX_EXPERIMENT_NAME = 500  # MLflow's limit (mlflow.utils.validation), checked without MLflow


def check_tracking(mlflow: Any) -> None:
    """What MLflow would refuse only once the first run is logged, after the measurement:
    an empty or too long experiment name, a tracking URI of no store it knows."""
    if not mlflow.get("enabled"):
        return
    experiment = str(mlflow.get("experiment") or "")
    if not experiment.strip():
        raise ConfigError(
            "mlflow.experiment is empty; give an experiment name (default: jacbench), or "
            "mlflow.enabled=false to run without tracking"
        )
    if len(experiment) > MAX_EXPERIMENT_NAME:
        raise ConfigError(
            f"mlflow.experiment is {len(experiment)} characters long; MLflow takes names of "
            f"at most {MAX_EXPERIMENT_NAME} (default: jacbench)"
        )
    uri = str(mlflow.get("tracking_uri") or "")
    scheme = uri.partition(":")[0].split("+")[0] if "://" in uri else ""
    if scheme and scheme not in TRACKING_SCHEMES and not scheme.startswith("databricks"):
        raise ConfigError(
            f"mlflow.tracking_uri={uri}: MLflow has no store for {scheme}://; valid: "
            "sqlite:///path/mlflow.db, http(s)://host:port (a tracking server), file:/path, "
            "postgresql://, mysql://, mssql://, databricks"
        )


def check_sweep(config: Any, jobs: int) -> None:
    """Everything a sweep of ``jobs`` jobs can check before its first job."""
    check_results_dir(config.get("results_dir"))
    check_tracking(config.mlflow)
    check_launcher(config.hydra.get("launcher"))
    batch = config.hydra.sweeper.get("max_batch_size")
    if batch is not None and int(batch) < 1:
        raise ConfigError(
            f"hydra.sweeper.max_batch_size={batch}: must be a positive number of jobs launched "
            "at once, or null (all at once)"
        )
    if jobs == 0:
        globs = [o for o in config.hydra.overrides.task if "glob(" in o]
        raise ConfigError(
            "the sweep has no jobs: "
            + (f"{', '.join(globs)} matches no choice" if globs else "an override has no values")
            + "; python -m jacbench --help lists the choices of each group"
        )
    if config.get("analysis"):
        load_analysis(str(config.analysis))


@contextlib.contextmanager
def refusing() -> Iterator[None]:
    """A ConfigError of the body stops the whole launch, with no job recorded (Hydra would
    turn it into a warning inside a callback, or a traceback inside the task function)."""
    try:
        yield
    except ConfigError as exc:
        raise LaunchRefused(str(exc)) from exc


def check_group_overrides(overrides: list[str], conf: Path) -> None:
    """``dtype=null`` or ``strategy=[jacrev,jacfwd]`` on a config group: Hydra's own errors
    ("Config group override must be a string", "Merge error: jacfwd_options is not a
    subclass...") name neither the input nor what to do."""
    for override in overrides:
        key, sep, value = override.partition("=")
        group = key.lstrip("+~")
        if not sep or "." in group or "/" in group or not (conf / group).is_dir():
            continue
        value = value.strip()
        if value in ("null", ""):
            choices = ", ".join(sorted(p.stem for p in (conf / group).glob("*.yaml")))
            raise ConfigError(f"{override}: {group} needs one of its choices: {choices}")
        if value.startswith("["):
            raise ConfigError(
                f"{override}: a job takes one {group}; to run several, sweep them: "
                f"python -m jacbench -m {group}={value.strip('[]')}"
            )
