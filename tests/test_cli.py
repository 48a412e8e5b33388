"""``python -m jacbench`` end to end: real Hydra, real parquet, real MLflow (sqlite)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from helpers.cli import NO_MLFLOW, QUICK, clean_env


def test_default_run_records_one_row_and_one_matching_mlflow_run(cli):
    proc = cli()  # the default job, default timing
    assert proc.returncode == 0, proc.stderr
    for label in ("median time", "first call", "peak memory", "rel error", "within tol"):
        assert label in proc.stdout
    rows = cli.results()
    assert len(rows) == 1
    row = rows.iloc[0]
    assert row["status"] == "ok" and row["strategy"] == "jacrev" and row["model"] == "mlp"
    assert row["n_in"] != row["n_out"] and min(row["n_in"], row["n_out"]) > 1
    assert row["time_median_s"] > 0 and row["n_timed"] > 1 and row["first_call_s"] > 0
    assert row["peak_mem_bytes"] > 0 and bool(row["within_tol"])

    client = MlflowClient(tracking_uri=cli.tracking_uri)
    experiment = client.get_experiment_by_name("jacbench")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id == row["mlflow_run_id"] and run.info.status == "FINISHED"
    metrics = run.data.metrics
    # Metrics keep 4 significant digits (readable in the UI); parquet keeps all of them.
    assert math.isclose(metrics["time_median_ms"], row["time_median_s"] * 1e3, rel_tol=1e-3)
    assert math.isclose(metrics["first_call_ms"], row["first_call_s"] * 1e3, rel_tol=1e-3)
    assert math.isclose(metrics["peak_mem_mib"], row["peak_mem_bytes"] / 2**20, rel_tol=1e-3)
    for name in ("rel_err", "err_eps"):
        assert math.isclose(metrics[name], float(row[name]), rel_tol=1e-3), name
    assert run.data.params["strategy"] == "jacrev" and run.data.params["model.hidden"] == "64"
    assert run.data.tags["torch_version"] == torch.__version__
    assert run.data.params["threads"] == "1"


def test_jacfwd_in_float64_is_exact_to_rounding(cli):
    proc = cli("strategy=jacfwd", "dtype=float64", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert row["dtype"] == "float64" and row["rel_err"] < 1e-12


def test_options_of_strategy_and_model_are_overridable(cli):
    proc = cli("strategy=fd_central", "strategy.eps=1e-4", "model.hidden=16", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert '"eps": 0.0001' in row["strategy_options"] and '"hidden": 16' in row["model_options"]
    assert row["strategy_kind"] == "approximate"


def test_naive_single_grad_is_recorded_as_wrong(cli):
    proc = cli("strategy=naive_single_grad", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert row["status"] == "ok" and not bool(row["within_tol"]) and row["err_eps"] > 1e3
    assert row["strategy_kind"] == "negative_control"


def test_cfg_job_introspection_works(cli):
    proc = cli("--cfg", "job", "strategy=jacrev", "strategy.chunk_size=16")
    assert proc.returncode == 0, proc.stderr
    assert "chunk_size: 16" in proc.stdout
    assert not (cli.folder / "results").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["strategy=nosuch"], ["Could not find 'strategy/nosuch'", "jacrev", "fd_central"]),
        (["dtype=float33"], ["Could not find 'dtype/float33'", "float64", "bfloat16"]),
        (["model=nosuch"], ["Could not find 'model/nosuch'", "mlp"]),
        (["strategy=fd_central", "strategy.epss=1"], ["valid keys of strategy: eps"]),
        (["timing.min_run_time=abc"], ["min_run_time"]),
    ],
    ids=["strategy", "dtype", "model", "option-typo", "option-type"],
)
def test_bad_choices_fail_before_the_job_with_valid_names(cli, args, expected):
    proc = cli(*args, *NO_MLFLOW)
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["strategy=fd_central", "strategy.eps=0"], "failed", "eps must be a positive number"),
        (["strategy=jacrev", "strategy.chunk_size=-2"], "failed", "chunk_size must be"),
        (["timing.min_run_time=-1"], "failed", "timing.min_run_time must be > 0"),
        (["timing.threads=0"], "failed", "timing.threads must be >= 1"),
        (["model.activation=nosuch"], "failed", "unknown activation 'nosuch'; valid: tanh"),
        (["strategy=analytic"], "skipped", "has no analytic Jacobian"),
    ],
    ids=["eps", "chunk", "min-run-time", "threads", "activation", "analytic"],
)
def test_bad_values_inside_the_job_are_recorded_with_a_clear_message(cli, args, status, message):
    proc = cli(*args, *QUICK, *NO_MLFLOW)
    assert proc.returncode == 1
    assert f"jacbench: {status}: " in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr
    row = cli.results().iloc[0]
    assert row["status"] == status and message in row["error_message"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_cuda_without_cuda_says_so_in_one_line(cli):
    proc = cli("device=cuda", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 1
    assert "CUDA is not available" in proc.stderr and "device=cpu" in proc.stderr
    assert cli.results().iloc[0]["status"] == "failed"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_run_measures_allocator_memory(cli):
    proc = cli("device=cuda", "strategy=jacfwd", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert row["device"] == "cuda" and row["memory_method"] == "cuda_max_allocated"
    assert row["peak_mem_bytes"] > 0 and bool(row["within_tol"])


def test_half_precision_runs_and_is_judged_by_its_own_tolerance(cli):
    proc = cli("dtype=bfloat16", "strategy=jacrev", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert row["dtype"] == "bfloat16" and bool(row["within_tol"])
    assert row["rel_err"] > 1e-4  # bfloat16 really is that coarse: the verdict is per dtype


def test_unreachable_tracking_server_still_writes_the_row(cli):
    env = clean_env(
        MLFLOW_TRACKING_URI="http://127.0.0.1:9",
        MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
        MLFLOW_HTTP_REQUEST_TIMEOUT="5",
    )
    proc = cli(*QUICK, env=env)
    assert proc.returncode == 1, proc.stderr  # something asked for was not done
    assert proc.stderr.startswith("jacbench: MLflow tracking failed (http://127.0.0.1:9)")
    row = cli.results().iloc[0]
    assert row["status"] == "ok" and row["mlflow_run_id"] == ""


def test_a_users_own_module_runs_through_target(cli):
    args = [
        "model=custom",
        "model._target_=torch.nn.Linear",
        "model.input_shape=[8]",
        "+model.in_features=8",
        "+model.out_features=3",
    ]
    for wrt in ("input", "params"):
        proc = cli(*args, f"model.wrt={wrt}", "dtype=float64", *QUICK, *NO_MLFLOW)
        assert proc.returncode == 0, proc.stderr
    rows = cli.results().sort_values("wrt")
    assert list(rows["wrt"]) == ["input", "params"]
    assert list(rows["n_in"]) == [8, 8 * 3 + 3] and list(rows["n_out"]) == [3, 3]
    assert (rows["rel_err"] < 1e-12).all()


def test_custom_model_without_target_names_the_missing_key(cli):
    proc = cli("model=custom", *QUICK, *NO_MLFLOW)
    assert proc.returncode == 1
    # input_shape is not demanded: a module may define it (issue 13)
    assert "missing value(s) for model._target_: set them" in proc.stderr


def test_per_sample_batch_and_strategies_that_cannot_batch(cli):
    ok = cli("model.batch=4", "strategy=jacfwd", "dtype=float64", *QUICK, *NO_MLFLOW)
    assert ok.returncode == 0, ok.stderr
    skipped = cli("model.batch=4", "strategy=functional", *QUICK, *NO_MLFLOW)
    assert skipped.returncode == 1 and "batch-aware strategy" in skipped.stderr
    rows = cli.results().set_index("strategy")
    assert rows.loc["jacfwd", "batch"] == 4 and rows.loc["jacfwd", "rel_err"] < 1e-12
    assert rows.loc["functional", "status"] == "skipped"


@pytest.mark.slow  # a real process with the user's PYTHONPATH: ~6 s
def test_the_readme_user_model_example_runs(cli):
    readme = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    block = re.search(r"```python\n(# my_model\.py\n.*?)```", readme, re.S)
    assert block, "docs/extending.md lost its user-model example"
    (cli.folder / "my_model.py").write_text(block.group(1))
    env = clean_env(PYTHONPATH=str(cli.folder))
    args = ["model=custom", "model._target_=my_model.Rotate", "model.input_shape=[2]"]
    proc = cli(*args, "strategy=jacfwd", *QUICK, *NO_MLFLOW, env=env)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert (row["n_in"], row["n_out"]) == (2, 3) and bool(row["within_tol"])


def test_auto_records_its_choice_in_results_and_mlflow(cli):
    proc = cli("strategy=auto", "strategy.compile=false", "model.n_in=4", "model.n_out=40", *QUICK)
    assert proc.returncode == 0, proc.stderr
    row = cli.results().iloc[0]
    assert row["chosen_strategy"] in {
        "jacfwd_folded",
        "jacfwd",
        "jacrev",
        "grads_batched",
        "functional",
        "autograd_loop",
    }
    assert f"chose {row['chosen_strategy']}" in proc.stdout
    client = MlflowClient(tracking_uri=cli.tracking_uri)
    run = client.get_run(row["mlflow_run_id"])
    assert run.data.params["chosen_strategy"] == row["chosen_strategy"]
    assert run.data.params["strategy.calibrate"] == "True"
