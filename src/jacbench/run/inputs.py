"""Checks of the inputs that concern a whole launch (where results go, the launcher, the
experiment's analysis), made before anything is measured so that a bad one costs nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jacbench.core.errors import ConfigError
from jacbench.run.launchers import LauncherKind, launcher_kind
from jacbench.run.pair import second_round
from jacbench.run.usage import LaunchRefused

EXAMPLE_ANALYSIS = "jacbench.experiments.seed001:answer"


def check_results_dir(value: object) -> None:
    """An empty ``results_dir=`` would scatter parquet files into the launch folder."""
    if value is None or not str(value).strip():
        raise ConfigError(
            f"results_dir={value or ''!s} is empty; give a folder for the parquet files "
            "(default: results; relative paths are under the launch folder)"
        )
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


ROUNDS = ("first", "side_by_side")


def check_round(value: object, single_run: bool = False) -> None:
    """``round`` is the sweep's own: ``side_by_side`` marks the jobs a sweep's second round
    adds to re-time two; a command line gives no other."""
    if str(value) not in ROUNDS:
        raise ConfigError(f"round={value}: valid rounds: {', '.join(ROUNDS)} (set by the sweep)")
    if str(value) != "first" and single_run:
        raise ConfigError(
            f"round={value}: a sweep makes its side-by-side jobs itself, from the rows "
            "of its first round; a single run measures the first round (leave round out)"
        )


def check_side_by_side(value: object) -> None:
    """``side_by_side`` names a second round (``run.pair.SecondRound``)."""
    try:
        second_round(value)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_sweep(config: Any, jobs: int) -> None:
    """Everything a sweep of ``jobs`` jobs can check before its first job."""
    check_results_dir(config.get("results_dir"))
    check_round(config.get("round"), single_run=True)
    check_side_by_side(config.get("side_by_side"))
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
    """``dtype=null`` or ``strategy=[jacrev,jacfwd]`` on a config group, refused in words
    (Hydra's own errors name neither the input nor what to do)."""
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


MULTIRUN_FLAGS = ("-m", "--multirun", "hydra.mode=MULTIRUN")


def sweeps(argv: list[str]) -> bool:
    """Whether the command line runs a sweep (``-m``, or a preset: every preset sweeps)."""
    return any(a in MULTIRUN_FLAGS or a.lstrip("+").startswith("experiment=") for a in argv)


def shared_options(argv: list[str]) -> list[str]:
    """In a sweep, each ``strategy.KEY=VALUE`` as ``++strategy.KEY=VALUE``: Hydra composes a
    sweep's base config with the default strategy, whose schema would refuse an option of
    the swept ones. A swept strategy that lacks it is one ``failed`` row, and a key no swept
    strategy has is refused before any job (``check_strategy_options``)."""
    if not sweeps(argv):
        return argv
    return [f"++{a}" if a.startswith("strategy.") and "=" in a else a for a in argv]


def check_strategy_options(configs: list[Any], registry: Any) -> None:
    """An option that no job's strategy has (a typo): refused, naming each swept strategy's
    options. One that some have is theirs; the others' jobs fail, naming theirs."""
    have: dict[str, set[str]] = {}
    options: dict[str, list[str]] = {}
    for cfg in configs:
        name = str(cfg.strategy.name)
        spec = registry.strategies.get(name)
        if spec is None:
            continue  # unknown or broken: its job fails and says why
        known = [f.name for f in dataclasses.fields(spec.options)]
        options[name] = known
        for key in cfg.strategy:
            if key != "name":
                have.setdefault(str(key), set()).update([name] if key in known else [])
    for key, names in have.items():
        if not names:
            valid = "; ".join(f"{n}: {', '.join(o) or 'none'}" for n, o in sorted(options.items()))
            raise ConfigError(
                f"unknown key 'strategy.{key}': no swept strategy has it; their options: {valid}"
            )
