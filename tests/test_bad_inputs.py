"""Every bad input gets one line naming the input and what is valid, never a traceback:
exit 1 for a single run (with a failed row where the job got that far), a refused launch
before anything runs for sweep-wide inputs (issue 13). In process, through the app's main."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.cli import clean_env
from helpers.tracking import half_made_db
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.registry import load_registry
from jacbench.record.parquet import read_results
from jacbench.report.__main__ import main as report_main


def broken_yaml(folder: Path) -> str:
    (folder / "cdir" / "model").mkdir(parents=True)
    (folder / "cdir" / "model" / "broken.yaml").write_text("_target_: x.Y\nn_in: [4\n")
    return f"--config-dir={folder / 'cdir'}"


CUSTOM = "model=custom"
BEFORE_THE_JOB = {  # refused while composing or checking the config: no row
    "unknown-strategy": (["strategy=nosuch"], ["Could not find 'strategy/nosuch'", "jacrev"]),
    "unknown-dtype": (["dtype=float33"], ["Could not find 'dtype/float33'", "float64"]),
    "option-typo": (
        ["strategy=fd_central", "strategy.epss=1"],
        ["unknown key 'strategy.epss'; valid keys of strategy: eps"],
    ),
    "timing-typo": (["timing.foo=1"], ["unknown key 'timing.foo'", "min_run_time, warmup"]),
    "top-level-typo": (["resultsdir=x"], ["unknown key 'resultsdir'", "results_dir"]),
    "model-key-typo": (["model.hiden=3"], ["unknown key 'model.hiden'", "+model.hiden="]),
    "wrong-type": (["timing.threads=abc"], ["timing.threads: Value 'abc'"]),
    "empty-results-dir": (["results_dir="], ["results_dir= is empty", "default: results"]),
    "broken-yaml": (["model=broken"], ["not valid YAML", "broken.yaml, line 3"]),
    # issue 32: Hydra's own errors here named neither the input nor what to do
    "group-null": (["dtype=null"], ["dtype=null: dtype needs one of its choices: bfloat16"]),
    "group-list": (["strategy=[jacrev,jacfwd]"], ["a job takes one strategy", "-m strategy="]),
    "unquoted": (["model.name=a\U0001f600b"], ["model.name=a", "quote a value", "my model"]),
    "line-break": (["model.name=a\nb"], ["quote a value"]),
}
IN_THE_JOB = {  # the job is recorded as failed, with the same line
    "shape-abc": (["model.input_shape=abc"], "model.input_shape must be a list of positive"),
    "shape-float": (["model.input_shape=[2.5]"], "got [2.5]"),
    "shape-negative": (["model.input_shape=[-3,-2]"], "got [-3, -2]"),
    "batch-zero": (["model.batch=0"], "model.batch must be a positive integer"),
    "wrt": (["model.wrt=weights"], "unknown wrt 'weights'; valid choices: input, params"),
    # issue 32: an OverflowError that named no key; a raw allocation failure; accepted
    "seed-overflow": (["seed=99999999999999999999999"], "seed=9999999999999999999999"),
    "input-too-large": (["model.input_shape=[1000000,1000000]"], "before any Jacobian"),
    "cpu-index": (["device.name=cpu:3"], "unsupported device 'cpu:3'; valid devices: cpu"),
    "max-entries": (["jacobian_max_entries=-1"], "jacobian_max_entries=-1: must be an integer"),
    "appended-option": (
        ["strategy=fd_central", "+strategy.epss=1"],
        "strategy 'fd_central' has no option(s) epss; valid options: eps",
    ),
    "eps-zero": (["strategy=fd_central", "strategy.eps=0"], "eps must be a positive number"),
    "threads-zero": (["timing.threads=0"], "timing.threads must be >= 1"),
    "device": (["device.name=tpu"], "valid devices: cpu, cuda"),
    "no-target": ([CUSTOM], "missing value(s) for model._target_"),
    "int-output": (
        [CUSTOM, "model._target_=bad_models.IntOutput", "strategy=fd_central"],
        "forward returns a torch.int64 tensor; a Jacobian needs floating-point outputs",
    ),
    "float-output": (
        [CUSTOM, "model._target_=bad_models.FloatOutput"],
        "forward returns float, not a torch.Tensor",
    ),
    "collapsed-batch": (
        [CUSTOM, "model._target_=bad_models.CollapsesBatch", "model.batch=3"],
        "accepts_batch=True, but forward maps a batch of 3 inputs to shape (4,)",
    ),
    "mixed-batch": (
        [CUSTOM, "model._target_=bad_models.MixesBatch"],
        "differs from calling it on each input",
    ),
}
SWEEP_WIDE = {  # refused before the first job of a sweep
    "analysis": (["-m", "analysis=nosuch:fn"], ["analysis=nosuch:fn: cannot import", "module:"]),
    "analysis-function": (
        ["-m", "analysis=jacbench.experiments.seed001:nosuch"],
        ["has no function 'nosuch'"],
    ),
    "n-jobs": (
        ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"],
        ["hydra.launcher.n_jobs=0", "-1 for one per core"],
    ),
    "sweep-results-dir": (["-m", "results_dir= "], ["results_dir= is empty"]),
    "max-batch-size": (
        ["-m", "hydra.sweeper.max_batch_size=0"],
        ["hydra.sweeper.max_batch_size=0: must be a positive number"],
    ),
    "no-jobs": (["-m", "strategy=glob(nomatch*)"], ["no jobs", "glob(nomatch*) matches no"]),
}


def assert_one_clear_line(code: int, lines: list[str], printed: str, *expected: str) -> None:
    assert code == 1, printed
    assert len(lines) == 1, printed
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Traceback" not in printed and "Error executing job" not in printed


@pytest.mark.parametrize("case", sorted(BEFORE_THE_JOB))
def test_bad_config_is_one_line_before_the_job(launch, tmp_path, case):
    args, expected = BEFORE_THE_JOB[case]
    extra = [broken_yaml(tmp_path)] if case == "broken-yaml" else []
    assert_one_clear_line(*launch(*extra, *args), *expected)
    assert not list(tmp_path.rglob("*.parquet"))


@pytest.mark.parametrize("case", sorted(IN_THE_JOB))
def test_bad_value_in_the_job_is_one_line_and_a_failed_row(launch, tmp_path, case):
    args, expected = IN_THE_JOB[case]
    assert_one_clear_line(*launch(*args), "jacbench: failed: ", expected)
    (row,) = read_results(tmp_path / "results").to_dict("records")
    assert row["status"] == "failed" and expected in row["error_message"]
    assert row["error_message"].count("strategy 'fd_central'") <= 1


SLOW_CASES = {"n-jobs"}  # the joblib launcher's import alone takes seconds


SWEEP_CASES = [pytest.param(c, marks=[pytest.mark.slow] * (c in SLOW_CASES)) for c in SWEEP_WIDE]


@pytest.mark.parametrize("case", sorted(SWEEP_CASES, key=lambda p: p.values))
def test_bad_sweep_input_is_refused_before_any_job(launch, tmp_path, case):
    args, expected = SWEEP_WIDE[case]
    assert_one_clear_line(*launch(*args, "report=false"), *expected)
    assert not (tmp_path / "results").exists()


TRACKING = {  # issue 32: each ended in a yellow warning (raw SQL) and exit 0
    "empty-experiment": (["mlflow.experiment="], ["mlflow.experiment is empty", "jacbench"]),
    "unknown-store": (["mlflow.tracking_uri=garbage://x"], ["no store for garbage://", "sqlite"]),
    # issue 46 (U7): refused by MLflow only once the job was measured
    "long-experiment": ([f"mlflow.experiment={'e' * 1000}"], ["1000 characters", "at most 500"]),
}


def test_the_experiment_name_limit_is_mlflows_own():
    from mlflow.utils.validation import MAX_EXPERIMENT_NAME_LENGTH

    from jacbench.run.inputs import MAX_EXPERIMENT_NAME

    assert MAX_EXPERIMENT_NAME == MAX_EXPERIMENT_NAME_LENGTH


@pytest.mark.parametrize("case", sorted(TRACKING))
@pytest.mark.parametrize("run", ["single", "sweep"])
def test_tracking_that_cannot_work_is_refused_before_measuring(launch, tmp_path, case, run):
    args, expected = TRACKING[case]
    sweep = ["-m", "report=false"] if run == "sweep" else []
    assert_one_clear_line(*launch(*sweep, *args, mlflow=True), *expected)
    assert not list(tmp_path.rglob("*.parquet"))


def test_tracking_that_fails_anyway_exits_1_with_the_row_written(launch, tmp_path):
    """A read-only or broken database fails only when the run is logged: the row is kept."""
    half_made_db(tmp_path / "mlflow.db")
    for args in (["strategy=jacrev"], ["-m", "strategy=jacrev,jacfwd", "report=false"]):
        code, lines, printed = launch(*args, mlflow=True)
        assert code == 1 and "Traceback" not in printed, printed
        assert any("MLflow tracking failed" in line for line in lines), printed
    assert len(read_results(tmp_path / "results")) == 2  # the sweep reused jacrev's row


def test_an_analysis_that_returns_no_text_fails_the_sweep(launch):
    code, lines, printed = launch("-m", "analysis=builtins:len", "report=false")
    assert code == 1 and "Traceback" not in printed, printed
    assert any("returned a int, not the text of an answer" in line for line in lines), printed


def test_a_name_too_long_for_mlflow_still_gets_its_run(launch, tmp_path):
    from helpers.tracking import mlflow_runs

    code, _, printed = launch("-m", f"model.name={'m' * 600}", "report=false", mlflow=True)
    assert code == 0, printed
    _, (child,) = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(child.info.run_name) == 500 and child.info.run_name.endswith("...")


def test_a_bad_value_inside_a_sweep_is_a_failed_record_and_exit_1(launch, tmp_path):
    code, lines, printed = launch("-m", "model.batch=0,2", "strategy=jacfwd", "report=false")
    assert code == 1 and "Traceback" not in printed, printed
    assert "model.batch must be a positive integer" in printed  # in the sweep's summary
    rows = read_results(tmp_path / "results").set_index("batch")
    assert set(rows["status"]) == {"ok", "failed"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--out", "afile"], "--out afile is a file; give a folder"),
        (["--out", "afile/sub"], "--out afile/sub: cannot create the folder"),
        (["nosuch"], "nosuch is not a folder of jacbench results"),
    ],
)
def test_report_bad_paths_are_one_line(tmp_path, monkeypatch, capsys, args, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit) as info:
        report_main(["results", *args] if args[0].startswith("--") else args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert line.startswith(f"python -m jacbench.report: error: {expected}")


@pytest.fixture
def terminal_sigint():
    """SIGINT as a terminal's Ctrl-C finds it: Python's handler here, the default in a child.
    A pytest started in the background of a script (``cmd &``) inherits SIGINT ignored, and
    Python keeps it so: then no Ctrl-C reaches a test's job."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.slow  # a real process and a real SIGINT: ~7 s
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, terminal_sigint):
    """A user's Ctrl-C (SIGINT to the process) while timing: no KeyboardInterrupt traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jacbench", "timing.min_run_time=60", "mlflow.enabled=false"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Sent once the job says it is timing (its log): a SIGINT that lands in an import inside a
    # third-party `except:` during start-up was swallowed once, and the job timed its 60 s.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        "timing for at least" in log.read_text() for log in tmp_path.glob("outputs/*/*/*.log")
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    # 130, or ended by the signal itself (CPython re-raises SIGINT when a second interrupt
    # lands during shutdown): a shell shows 130 for both
    assert proc.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip().splitlines()[-1].startswith("jacbench: interrupted (Ctrl-C)")


@pytest.mark.slow  # real processes and real signals: ~15 s
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize("run", ["single", "sweep", "joblib"])
def test_sigterm_and_sighup_stop_like_ctrl_c_and_close_the_sweep(tmp_path, sig, code, run):
    """Issue 32: SIGTERM (SLURM's preemption and time limit) or SIGHUP to a run or a sweep
    ended with exit 143/129, no message, the MLflow parent RUNNING and the claim left."""
    db = tmp_path / "mlflow.db"
    sweep = {
        "single": [],
        "sweep": ["-m", "seed=0,1", "report=false"],
        "joblib": ["-m", "seed=0,1", "report=false", "hydra/launcher=joblib"],
    }[run]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jacbench",
            *sweep,
            "timing.min_run_time=60",
            f"mlflow.tracking_uri=sqlite:///{db}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        # as from a terminal: under nohup (or a CI runner that ignores SIGHUP) the child
        # would inherit an ignored SIGHUP, which jacbench rightly leaves ignored
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any(
        "timing for at least" in log.read_text()
        for log in [*tmp_path.glob("outputs/*/*/*.log"), *tmp_path.glob("multirun/*/*/*/*.log")]
    ):
        time.sleep(0.2)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"jacbench: interrupted ({sig.name})")
    assert not list(tmp_path.glob("results/*.parquet"))  # the job in progress: not recorded
    assert not list(tmp_path.glob("results/.claims/*"))  # its claim released
    if run != "single":
        from mlflow.tracking import MlflowClient

        runs = MlflowClient(f"sqlite:///{db}").search_runs(["1"])
        parents = [r for r in runs if r.data.tags.get("jacbench.role") == "sweep"]
        assert len(parents) == 1 and parents[0].info.status == "KILLED"
        assert parents[0].info.end_time is not None
        assert sig.name in parents[0].data.tags["error_message"]


def interrupted_inside(library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``jacfwd``, whose 5th call gets a real SIGINT that the library then turns into an
    error, as functorch's clean-up does ("INTERNAL ASSERT FAILED"), or swallows."""
    registry = load_registry()  # the one the app uses
    spec, calls = registry.get("jacfwd"), []

    def setup(problem, opts):
        jac = spec.setup(problem, opts).jac  # jacfwd declares its value-and-Jacobian too

        def call(x):
            calls.append(x)
            if len(calls) != 5:
                return jac(x)
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler runs before this returns
            except KeyboardInterrupt:
                pass  # "swallows": a bare except, or a __del__
            if library == "turns it into an error":  # raised outside the except: no chain
                raise RuntimeError("!dynamicLayerStack.empty() INTERNAL ASSERT FAILED")
            return jac(x)

        return call

    monkeypatch.setitem(registry.strategies, "jacfwd", replace(spec, setup=setup))


@pytest.mark.parametrize("library", ["turns it into an error", "swallows it"])
@pytest.mark.parametrize("run", ["single", "sweep"])
def test_ctrl_c_stops_the_job_whatever_the_library_made_of_it(
    launch, tmp_path, monkeypatch, terminal_sigint, run, library
):
    """A Ctrl-C inside a timed torch.func transform: 14 in 3000 became functorch's RuntimeError
    (the job was recorded as failed and a sweep went on); one was swallowed (the job timed on).
    It is an interrupt all the same: one line, exit 130, the job not recorded, no later job."""
    interrupted_inside(library, monkeypatch)
    sweep = ["-m", "seed=0,1", "report=false"] if run == "sweep" else []
    started = time.monotonic()
    code, lines, printed = launch(*sweep, "strategy=jacfwd", "timing.min_run_time=30")
    assert time.monotonic() - started < 25, "the job went on timing after the Ctrl-C"
    assert code == 130 and "Traceback" not in printed, printed
    assert lines[-1].startswith("jacbench: interrupted (Ctrl-C)"), printed
    assert not list(tmp_path.glob("results/*.parquet")) and "RuntimeError" not in printed
    assert run == "single" or "0 failed, 0 skipped, 0 already done (resumed), 2 without" in printed


def test_an_error_raised_while_a_ctrl_c_unwinds_stands_for_the_ctrl_c():
    """Without jacbench's handler (the library API), the chain tells: functorch's assert is
    raised while the KeyboardInterrupt unwinds the transform, so that is its context."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("!dynamicLayerStack.empty() INTERNAL ASSERT FAILED") from None
    except RuntimeError as exc:
        with pytest.raises(KeyboardInterrupt):
            raise_if_interrupt(exc)
    raise_if_interrupt(RuntimeError("a real failure"))  # not an interrupt: nothing raised
