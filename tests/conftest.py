"""Shared helpers: run the real CLI (real Hydra, real MLflow sqlite) in a scratch folder."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path
from subprocess import CompletedProcess, run

import pandas as pd
import pytest
import torch

from jacbench import testing
from jacbench.record.parquet import read_results
from jacbench.record.result import Result
from own_processes import ISOLATED, PRELOAD, OwnProcesses

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
# auto's remembered decisions off (tests/test_decisions.py turns them on in a tmp folder):
# a decision remembered by one test would skip the calibration another test observes.
os.environ["JACBENCH_CACHE_DIR"] = ""

QUICK = ["timing=quick"]
NO_MLFLOW = ["mlflow.enabled=false"]
NO_REPORT = ["report=false"]  # a sweep whose test is not about its report: ~2 s less
THREADS = torch.get_num_threads()


def torch_state() -> dict[str, object]:
    """The thread-local autograd state a test (or jacbench) could leave behind."""
    return {
        "inference mode": torch.is_inference_mode_enabled(),
        "grad enabled": torch.is_grad_enabled(),
        "functorch levels": torch._C._functorch.get_dynamic_layer_stack_depth(),
        "torch function modes": torch._C._len_torch_function_stack(),
    }


CLEAN_STATE = torch_state()


@pytest.fixture(autouse=True)
def torch_state_left_clean():
    """Fail the test that leaves autograd state behind, instead of every test after it."""
    yield
    left = {k: v for k, v in torch_state().items() if v != CLEAN_STATE[k]}
    if left:
        _LEAKED.append(torch.autograd.grad_mode._enter_inference_mode(False))
        torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(0)
        torch._C._set_grad_enabled(True)
        pytest.fail(f"the test left torch state behind: {left}")


_LEAKED: list[object] = []


# The contract's problems (jacbench.testing): a compiled strategy's graph of one problem is
# then compiled once a session (inductor's FX graph cache, on disk), not once per file.
CONTRACT_MLP = testing.MLP
CONTRACT_RECIPROCAL = testing.PROBLEMS["reciprocal"]


def compiles(name: str, options: dict[str, object] | None = None) -> bool:
    """Whether a registered strategy's setup runs torch.compile (by default: its defaults)."""
    from jacbench.core.registry import load_registry
    from jacbench.strategies.compiled import CompileOptions

    opts = load_registry().get(name).make_options(dict(options or {}))
    return isinstance(opts, CompileOptions) or bool(getattr(opts, "compile", False))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compiles: runs torch.compile, so it runs apart, with its file's other such tests, in a "
        "Python process of their own",
    )


@pytest.hookimpl(tryfirst=True)  # before -m selects, so 'not slow' sees the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Registry-wide tests: the cases of a strategy that compiles (with its declared
    test_options) are marked ``compiles``; every ``compiles`` test is also ``slow`` (seconds
    of compiling in a new interpreter)."""
    from jacbench.core.registry import load_registry

    registry = load_registry()
    compiling = {n for n, spec in registry.strategies.items() if compiles(n, spec.test_options)}
    for item in items:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("name")
        if isinstance(name, str) and name in compiling:
            item.add_marker(pytest.mark.compiles)
        if item.get_closest_marker("compiles") is not None:
            item.add_marker(pytest.mark.slow)


_OWN: list[OwnProcesses] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get(ISOLATED) or session.config.option.collectonly:
        return
    own = [item for item in session.items if item.get_closest_marker("compiles")]
    if own:
        files: dict[str, list[str]] = {}
        for item in own:
            files.setdefault(item.nodeid.partition("::")[0], []).append(item.nodeid)
        modules = sorted(
            {item.module.__name__ for item in own if isinstance(item, pytest.Function)}
        )
        ahead = "PYTEST_XDIST_WORKER" not in os.environ
        _OWN.append(OwnProcesses(session.config.rootpath, files, [*PRELOAD, *modules], ahead))


def pytest_sessionfinish() -> None:
    while _OWN:
        _OWN.pop().stop()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not _OWN or not _OWN[0].runs(pyfuncitem.nodeid):
        return None
    _OWN[0].outcome(pyfuncitem.nodeid)
    return True


@pytest.fixture(autouse=True)
def compiled_only_in_own_process(request: pytest.FixtureRequest):
    """Fail a test that ran torch.compile in the shared process without the mark."""
    before = _frames_compiled()
    yield
    if not os.environ.get(ISOLATED) and _frames_compiled() != before:
        pytest.fail(
            f"{request.node.nodeid} ran torch.compile in the shared test process: "
            "mark it @pytest.mark.compiles",
            pytrace=False,
        )


def _frames_compiled() -> int:
    """Frames dynamo has processed and graphs compiled without it (torch._inductor.compile
    of a traced graph) in this process (0 before torch._dynamo is imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    return sum(utils.counters["frames"].values()) + utils.counters["aot_autograd"]["total"]


rel_err, jacobian_at = testing.rel_err, testing.jacobian_at


def contract_prepare(name: str, problem, **options):
    """A registered strategy prepared as the contract checks prepare it (its test_options)."""
    from jacbench.core.registry import load_registry

    registry = load_registry()
    return registry.prepare(name, problem, **{**registry.get(name).test_options, **options})


def jacobian(name: str, problem, **options) -> torch.Tensor:
    """A registered strategy's Jacobian at the problem's own point, as the runner times it."""
    return contract_prepare(name, problem, **options)(problem.x)


def compiles_or_calibrates(name: str) -> bool:
    """Whether a strategy's default setup runs torch.compile or a calibration (seconds each):
    the registry-wide tests run those on the small models, with one full ``auto`` test."""
    from jacbench.core.registry import load_registry

    return compiles(name) or bool(
        getattr(load_registry().get(name).make_options({}), "calibrate", False)
    )


def compose_job(*overrides: str, with_hydra: bool = False):
    """The job config ``python -m jacbench OVERRIDES`` runs, through Hydra's compose API (for
    tests that call ``jacbench.run.runner.execute`` directly); ``with_hydra``: with its ``hydra``
    node (launcher, sweeper)."""
    from hydra import compose, initialize_config_dir

    from jacbench.run.config import conf_dir, register_configs
    from jacbench.run.schema import strategy_options

    register_configs(strategy_options())  # strategy=<name> and its typed options
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", list(overrides), return_hydra_config=with_hydra)


def sqlite_uri(folder: Path) -> str:
    """The tracking URI a job launched in ``folder`` uses by default."""
    return f"sqlite:///{folder / 'mlflow.db'}"


def half_made_db(path: Path) -> None:
    """What a process killed during MLflow's migrations leaves: every table made, the
    schema version not yet stamped, a later table missing."""
    import sqlite3

    from jacbench.record.mlflow_db import create_atomically

    made = path.with_name("made.db")  # not the tested URI, which no cache may know
    create_atomically(made)
    with contextlib.closing(sqlite3.connect(made)) as db:
        db.executescript("DELETE FROM alembic_version; DROP TABLE secrets;")
    os.replace(made, path)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(extra)
    return env


def make_result(**changes) -> Result:
    """A hand-built Result for tests of code that only reads results (schema, reports)."""
    base = {f.name: None for f in dataclasses.fields(Result)}
    base.update(
        model="mlp",
        strategy="jacrev",
        strategy_kind="exact",
        strategy_mode="reverse",
        chosen_strategy="",
        dtype="float32",
        device="cpu",
        wrt="input",
        n_in=3,
        n_out=2,
        batch=1,
        seed=0,
        status="ok",
        error_message="",
        time_median_s=1e-4,
        time_iqr_s=1e-6,
        n_timed=100,
        timing_warning="",
        first_call_s=2e-3,
        measure_s=0.5,
        ref_norm=1.0,
        out_norm=2.0,
        jacobian=[1.0, 2.0],
        threads=1,
        peak_mem_bytes=1024,
        memory_method="cpu",
        max_abs_err=1e-8,
        rel_err=2e-7,
        err_eps=1.7,
        tolerance=1.2e-5,
        within_tol=True,
        undecided_reason="",
        pattern_source="",
        decided_by="",
        tier="",
        reference_method="forward_float64",
        reference_uncertainty=1e-16,
        strategy_options="{}",
        model_options="{}",
        config_hash="abc",
        mlflow_run_id="",
        torch_version="2",
        device_name="cpu",
        git_commit="",
        job_id="0123456789abcdef",
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )
    base.update(changes)
    median = base["time_median_s"]
    if median is not None and "n_blocks" not in changes:  # a settled timing: 10 blocks, +-2%
        interval = {"median_s": median, "ci_low_s": median * 0.98, "ci_high_s": median * 1.02}
        base.update({f"time_{k}": v for k, v in interval.items() if k != "median_s"})
        base.update({f"cpu_{k}": v for k, v in interval.items()})
        base.update(n_blocks=10, cpu_wall_ratio=1.0, load_avg_1m=0.5)
    return Result(**base)


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
    ) -> CompletedProcess:
        env = env or clean_env()
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


def mlflow_runs(tracking_uri: str) -> tuple[list, list]:
    """(sweep parent runs, job runs) of the jacbench experiment, read back through MLflow."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name("jacbench")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("jacbench.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(tmp_path, monkeypatch)


LAUNCH_FAST = ["timing=quick", "timing.memory=false"]


@pytest.fixture
def launch(cli: Cli):
    """A fast ``python -m jacbench ARGS`` (quick timing, no memory, MLflow only if asked):
    (exit code, the ``jacbench:`` lines of stderr, everything printed)."""

    def run(*args: str, mlflow: bool = False) -> tuple[int, list[str], str]:
        tracking = f"mlflow.enabled={str(mlflow).lower()}"  # MLflow on: sqlite in tmp_path
        proc = cli(*args, *LAUNCH_FAST, tracking)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("jacbench:")]
        return proc.returncode, lines, proc.stdout + proc.stderr

    return run


def load_script(name: str):
    """A script of ``scripts/`` imported as a module, so tests call its functions in process."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
