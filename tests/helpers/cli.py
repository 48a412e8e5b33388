"""``python -m jacbench`` as a user runs it, in process or as a subprocess, and the configs
and scripts it runs."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
import traceback
from pathlib import Path
from subprocess import CompletedProcess, run

import pandas as pd
import pytest
import torch

from helpers.tracking import seed_store, sqlite_uri
from jacbench.record.parquet import read_results

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
QUICK = ["timing=quick"]
NO_MLFLOW = ["mlflow.enabled=false"]
NO_REPORT = ["report=false"]  # a sweep whose test is not about its report: ~2 s less
LAUNCH_FAST = ["timing=quick", "timing.memory=false"]
THREADS = torch.get_num_threads()


def compose_job(*overrides: str, with_hydra: bool = False):
    """The job config ``python -m jacbench OVERRIDES`` runs, through Hydra's compose API (for
    tests that call ``jacbench.run.runner.execute`` directly); ``with_hydra``: with its ``hydra``
    node (launcher, sweeper)."""
    from hydra import compose, initialize_config_dir

    from jacbench.core.registry import load_registry
    from jacbench.run.config import conf_dir, register_configs

    register_configs(load_registry())  # strategy=<name> and its typed options
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", list(overrides), return_hydra_config=with_hydra)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(extra)
    return env


# Every launcher but Hydra's basic one runs jobs in other processes: a real subprocess then,
# unless Hydra only prints the composed config (and launches nothing).
OUT_OF_PROCESS = "hydra/launcher="
PRINTS_ONLY = {"--cfg", "--info"}


class Cli:
    """``python -m jacbench`` run as a user runs it, from a scratch launch folder.

    By default in this process (``jacbench.run.app.main`` with its argv, in the launch folder,
    stdout and stderr captured): the same Hydra, MLflow and parquet code without ~5 s of
    interpreter start-up per call. A real subprocess where the run needs one: another
    launcher (unless the run only prints its config), an environment that changes more than
    MLflow's variables, or ``subprocess=True``.
    """

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.monkeypatch = monkeypatch

    def __call__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        subprocess: bool = False,
        new_store: bool = False,
    ) -> CompletedProcess:
        """``new_store``: let the run build its own MLflow database (by default a folder
        without one gets a copy of one MLflow built for the test process)."""
        env = env or clean_env()
        if not new_store and self._tracks_into_the_folder(args, env):
            seed_store(self.folder)
        if subprocess or not self._in_process_possible(args, env):
            return run(
                [sys.executable, "-m", "jacbench", *args],
                cwd=self.folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        return self._in_process(list(args), env)

    @staticmethod
    def _tracks_into_the_folder(args: tuple[str, ...], env: dict[str, str]) -> bool:
        """MLflow's default store: ``mlflow.db`` in the launch folder."""
        elsewhere = any(a.startswith(("mlflow.tracking_uri=", "--")) for a in args)
        off = "mlflow.enabled=false" in args or "MLFLOW_TRACKING_URI" in env
        return not (elsewhere or off)

    @staticmethod
    def _in_process_possible(args: tuple[str, ...], env: dict[str, str]) -> bool:
        if any(a.startswith(OUT_OF_PROCESS) for a in args) and not PRINTS_ONLY & set(args):
            return False
        ours = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        theirs = {k: v for k, v in env.items() if not k.startswith("MLFLOW_")}
        return ours == theirs

    def _in_process(self, args: list[str], env: dict[str, str]) -> CompletedProcess:
        from jacbench.run.app import main

        with self.monkeypatch.context() as patch:
            for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
                patch.delenv(name)
            for name, value in env.items():
                if name.startswith("MLFLOW_"):
                    patch.setenv(name, value)
            patch.chdir(self.folder)
            patch.setattr(sys, "argv", ["jacbench", *args])
            out, err = io.StringIO(), io.StringIO()
            code = 0
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main()
                except SystemExit as exc:  # what the interpreter would make of it
                    if exc.code is None or isinstance(exc.code, int):
                        code = exc.code or 0
                    else:
                        print(exc.code, file=sys.stderr)
                        code = 1
                except Exception:  # an uncaught error: traceback and exit status 1
                    traceback.print_exc()
                    code = 1
            torch.set_num_threads(THREADS)  # a job sets its own; later tests get the default
        return CompletedProcess(["jacbench", *args], code, out.getvalue(), err.getvalue())

    @property
    def tracking_uri(self) -> str:
        return sqlite_uri(self.folder)

    def results(self) -> pd.DataFrame:
        return read_results(self.folder / "results")

    def summaries(self) -> list[Path]:
        return sorted(self.folder.glob("multirun/*/*/summary.parquet"))


def load_script(name: str):
    """A script of ``scripts/`` imported as a module, so tests call its functions in process."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
