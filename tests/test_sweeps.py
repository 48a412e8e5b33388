"""Multirun sweeps: parent and child runs, summaries, failures, resume, launchers."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hydra.experimental.callback import Callback

from helpers.cli import NO_MLFLOW, NO_REPORT, QUICK, clean_env
from helpers.tracking import mlflow_runs
from jacbench.run.app import cores_per_job

GRID = [  # 8 jobs: two of each kind (exact, approximate), both dtypes, two models
    "strategy=jacrev,fd_central",
    "dtype=float32,float64",
    "model=mlp,seed003_cat_poly",
    *QUICK,
    *NO_REPORT,
]


def resumed_jobs(stdout: str) -> int:
    return len(re.findall(r"job \d+: already done", stdout))


def proc_problems(cli) -> list[tuple[str, str]]:
    """(model, dtype) of each recorded row: the sweep's problems."""
    rows = cli.results()
    return list(zip(rows["model"], rows["dtype"], strict=True))


def eight_jobs_recorded(cli, proc) -> pd.DataFrame:
    """The rows of GRID's sweep, checked: every job ok once, each with its MLflow run nested
    under the sweep's, and the summary; returns the rows."""
    assert proc.returncode == 0, proc.stderr
    assert "[8/8]" in proc.stdout and "8/8 jobs recorded: 8 ok" in proc.stdout
    # every sweep ends with its recommendation, one line per problem (issue 27)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("Recommended: ")]
    assert len(lines) == len(set(map(tuple, proc_problems(cli)))), proc.stdout
    rows = cli.results()
    assert len(rows) == 8 and set(rows["status"]) == {"ok"}
    assert rows["config_hash"].nunique() == 8
    assert (rows["threads"] == 1).all()

    (parent,), children = mlflow_runs(cli.tracking_uri)
    assert parent.info.status == "FINISHED" and parent.data.metrics["n_ok"] == 8
    assert len(children) == 8
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {c.info.run_id for c in children} == set(rows["mlflow_run_id"])
    from mlflow.tracking import MlflowClient

    artifacts = {a.path for a in MlflowClient(cli.tracking_uri).list_artifacts(parent.info.run_id)}
    assert {"summary.parquet", "multirun.yaml"} <= artifacts

    (summary_path,) = cli.summaries()
    summary = pd.read_parquet(summary_path)
    assert sorted(summary["job_num"]) == list(range(8)) and not summary["resumed"].any()
    return rows


def jobs_run_in(summary_path) -> set[str]:
    """The jobs of a sweep that Hydra ran (each gets a numbered folder; a job counted as done
    before it was sent out gets none)."""
    return {p.name for p in summary_path.parent.iterdir() if p.name.isdigit()}


@pytest.mark.slow
def test_eight_jobs_are_recorded_nested_summarised_and_not_rerun(cli):
    eight_jobs_recorded(cli, cli("-m", *GRID))
    again = cli("-m", *GRID)
    assert again.returncode == 0, again.stderr
    assert resumed_jobs(again.stdout) == 8
    assert len(cli.results()) == 8  # no new row
    parents, children = mlflow_runs(cli.tracking_uri)
    assert len(parents) == 2 and len(children) == 8  # no new job run
    resumed = pd.read_parquet(cli.summaries()[-1])
    assert resumed["resumed"].all() and len(resumed) == 8


@pytest.mark.slow
def test_eight_joblib_jobs_on_four_workers_lose_nothing_and_a_rerun_sends_out_only_the_lost_one(
    cli,
):
    # 4 workers at once, two jobs each: twice as many writers as this 2-core machine has cores
    # (8 workers cost 4 more interpreter start-ups, about 40 s of CPU, for no more overlap here)
    joblib = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=4"]
    rows = eight_jobs_recorded(cli, cli("-m", *GRID, *joblib, timeout=600))
    _, children = mlflow_runs(cli.tracking_uri)
    by_id = {c.info.run_id: c for c in children}
    for _, row in rows.iterrows():
        metrics = by_id[row["mlflow_run_id"]].data.metrics  # 4 significant digits
        assert metrics["rel_err"] == pytest.approx(row["rel_err"], rel=1e-3)

    first = pd.read_parquet(cli.summaries()[0]).set_index("config_hash")
    lost = rows.iloc[5]["config_hash"]
    (row_file,) = (cli.folder / "results").glob(f"*_{lost}_*.parquet")
    row_file.unlink()
    again = cli("-m", *GRID, *joblib, timeout=600)
    assert again.returncode == 0, again.stderr
    assert resumed_jobs(again.stdout) == 7 and "8/8 jobs recorded: 8 ok" in again.stdout
    summary_path = cli.summaries()[-1]
    resumed = pd.read_parquet(summary_path).set_index("config_hash")
    assert resumed["resumed"].sum() == 7 and not resumed.loc[lost, "resumed"]
    assert (resumed["job_num"] == first["job_num"].reindex(resumed.index)).all()  # same numbers
    (ran,) = jobs_run_in(summary_path)  # no worker for the 7 (Hydra numbers the one it ran 0)
    overrides = (summary_path.parent / ran / ".hydra" / "overrides.yaml").read_text()
    strategy, dtype, model = first.loc[lost, ["strategy", "dtype", "model"]]
    assert all(f"{k}={v}" in overrides for k, v in [("strategy", strategy), ("dtype", dtype)])
    assert f"model={model}" in overrides
    assert len(cli.results()) == 8
    parents, children = mlflow_runs(cli.tracking_uri)
    assert len(parents) == 2 and len(children) == 9


@pytest.mark.parametrize(
    ("n_jobs", "cores", "each"),
    [(4, 16, 4), (-1, 16, 1), (32, 16, 1), (4, None, 1), (-1, None, 1)],
)
def test_joblib_workers_share_the_cores_even_where_the_machine_does_not_count_them(
    n_jobs, cores, each
):
    """os.cpu_count may answer None: one job per core then meant dividing by None."""
    assert cores_per_job(n_jobs, cores) == each


def test_force_reruns_done_jobs(cli):
    args = ["-m", "strategy=jacrev,fd_central", *QUICK, *NO_MLFLOW, *NO_REPORT]
    assert cli(*args).returncode == 0
    assert cli(*args, "force=true").returncode == 0
    rows = cli.results()
    assert len(rows) == 4 and rows["config_hash"].nunique() == 2


def test_a_failing_job_is_recorded_the_others_finish_and_the_sweep_exits_1(cli):
    proc = cli("-m", "model.hidden=8,-1,16", *QUICK, *NO_REPORT)
    assert proc.returncode == 1
    rows = cli.results().sort_values("status")
    assert list(rows["status"]) == ["failed", "ok", "ok"]
    assert "must be at least 1" in rows.iloc[0]["error_message"]
    (parent,), children = mlflow_runs(cli.tracking_uri)
    assert parent.info.status == "FAILED" and parent.data.metrics["n_failed"] == 1
    assert sorted(c.info.status for c in children) == ["FAILED", "FINISHED", "FINISHED"]
    assert "1 failed" in proc.stdout


@pytest.mark.slow
def test_a_killed_sweep_stays_readable_and_resumes_only_missing_jobs(cli):
    strategies = "jacrev,jacfwd,functional,fd_forward,fd_central,grads_batched"
    args = ["-m", f"strategy={strategies}", "timing.min_run_time=0.5", *NO_REPORT]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jacbench", *args],
        cwd=cli.folder,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    results = cli.folder / "results"
    deadline = time.monotonic() + 120
    while len(list(results.glob("*.parquet"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = cli.results()
    assert 2 <= len(first) < 6 and set(first["status"]) == {"ok"}

    (killed,), _ = mlflow_runs(cli.tracking_uri)
    assert killed.info.status == "RUNNING"  # its sweep never reached its end

    again = cli(*args, timeout=300)
    assert again.returncode == 0, again.stderr
    assert resumed_jobs(again.stdout) == len(first)
    rows = cli.results()
    assert len(rows) == 6 and rows["config_hash"].nunique() == 6
    assert set(rows["status"]) == {"ok"}
    # issue 46 (D3): the parent a SIGKILL left RUNNING is closed by the next sweep
    assert f"closed the MLflow parent run {killed.info.run_id}" in again.stdout
    parents, _ = mlflow_runs(cli.tracking_uri)
    ended = {p.info.run_id: p for p in parents}
    assert ended[killed.info.run_id].info.status == "KILLED"
    assert "did not reach its end" in ended[killed.info.run_id].data.tags["error_message"]
    assert {p.info.status for p in parents} == {"KILLED", "FINISHED"}


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_sweep(cli):
    proc = cli(
        "-m", "hydra/launcher=local", "strategy=jacrev,fd_central", *QUICK, *NO_REPORT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    rows = cli.results()
    assert len(rows) == 2 and set(rows["status"]) == {"ok"}
    assert list((cli.folder / "multirun").glob("*/*/.submitit"))
    _, children = mlflow_runs(cli.tracking_uri)
    assert len(children) == 2


def test_slurm_launcher_config_composes_with_cluster_defaults(cli):
    proc = cli("--cfg", "hydra", "-p", "hydra.launcher", "hydra/launcher=slurm")
    assert proc.returncode == 0, proc.stderr
    for text in (
        "SlurmLauncher",
        "timeout_min: 60",
        "array_parallelism: 32",
        "setup:",
    ):
        assert text in proc.stdout


def test_a_job_that_crashes_outside_measurement_still_gets_the_sweep_closed(cli, monkeypatch):
    """A crash that leaves no row (a bug outside measurement, here in the runner itself)."""
    from jacbench.run import runner

    execute = runner.execute

    def crashing(cfg, *args):
        if cfg.strategy.name == "jacfwd":
            raise RuntimeError("crashed before the job ran")
        return execute(cfg, *args)

    monkeypatch.setattr(runner, "execute", crashing)
    proc = cli("-m", "strategy=jacrev,jacfwd", *QUICK, *NO_REPORT)
    assert proc.returncode == 1  # Hydra reports the crashed job; on_multirun_end is skipped
    assert len(cli.results()) == 1
    (parent,), _ = mlflow_runs(cli.tracking_uri)
    assert parent.info.status == "FAILED"  # closed anyway, never left RUNNING
    assert parent.data.metrics["n_missing"] == 1
    (summary_path,) = cli.summaries()
    assert len(pd.read_parquet(summary_path)) == 1
    assert "without a record" in proc.stdout


class DeleteResults(Callback):
    """Deletes results/ once the second job has recorded its row, as a user's rm -r would."""

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if config.hydra.job.num == 1:
            shutil.rmtree(Path(config.hydra.runtime.cwd) / "results")


def test_rows_deleted_during_the_sweep_are_counted_missing_and_exit_1(launch):
    """Issue 32: '4/6 jobs recorded ... 0 without a record', two wrong 'unreadable result
    file' lines, exit 0."""
    callback = f"+hydra.callbacks.rm._target_={__name__}.DeleteResults"
    code, lines, printed = launch("-m", "strategy=jacrev,jacfwd,functional", callback)
    assert code == 1 and "Traceback" not in printed, printed
    assert any("job(s) 0, 1 were recorded and are gone" in line for line in lines), lines
    assert "1/3 jobs recorded" in printed and "2 without a record" in printed, printed
    assert "unreadable" not in printed


@pytest.mark.compiles
@pytest.mark.slow
def test_a_compiled_sweep_of_several_jobs_runs_in_one_process(cli):
    """Issue 28: no test covered compiled jobs one after another in one process (the basic
    launcher), although +experiment=seed004 compiles: each job right, every compiled way
    timed, the default auto settled in its compiled tier."""
    strategies = "strategy=jacfwd_folded,jacrev_compiled,auto"
    proc = cli(
        "-m",
        strategies,
        "model=seed004_small",
        "dtype=float32,float64",
        *QUICK,
        *NO_MLFLOW,
        *NO_REPORT,
    )
    assert proc.returncode == 0, proc.stderr
    rows = cli.results()
    assert len(rows) == 6 and set(rows["status"]) == {"ok"} and rows["within_tol"].all()
    auto = rows[rows["strategy"] == "auto"]
    assert set(auto["tier"]) == {"compiled"} and set(auto["chosen_strategy"]) == {"jacfwd_folded"}


# Columns an earlier jacbench did not write (ea13d8b, 49 columns; d613268 lacked only tier).
EARLIER_LACKING = ["tier", "decided_by", "pattern_source", "undecided_reason", "n_blocks"]
EARLIER_LACKING += ["time_ci_low_s", "time_ci_high_s", "time_blocks_s", "cpu_blocks_s"]
EARLIER_LACKING += ["cpu_median_s", "cpu_wall_ratio", "load_avg_1m", "reference_sample"]
EARLIER_LACKING += ["round", "pair_id", "jacbench_version", "code_digest", "hostname", "cpu_model"]
EARLIER_LACKING += ["allocator"]  # before 2026-11-26
EARLIER_LACKING += [f"thread_cpu_{k}" for k in ("blocks_s", "median_s", "ci_low_s", "ci_high_s")]


def test_a_sweep_resumed_over_rows_of_an_earlier_jacbench_ends_with_its_summary(launch, tmp_path):
    """Issue 46 (D2): after an upgrade, the same sweep with one strategy more ended in
    ArrowInvalid ('tier' non-nullable): no summary, no report, no recommendation, exit 1."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    from helpers.cli import compose_job
    from helpers.results import make_result
    from jacbench.record.parquet import result_filename
    from jacbench.run.identity import config_hash

    grid = ["model=seed003_cat_poly", "timing=quick", "timing.memory=false"]
    earlier = make_result(
        strategy="jacrev",
        model="seed003_cat_poly",
        config_hash=config_hash(compose_job("strategy=jacrev", *grid)),
    )
    row = {k: v for k, v in dataclasses.asdict(earlier).items() if k not in EARLIER_LACKING}
    (tmp_path / "results").mkdir()
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "results" / result_filename(earlier))

    # kept although stale (issue 42: by default such a row is measured again), and said so
    code, lines, printed = launch("-m", "strategy=jacrev,jacfwd", *grid, "reuse_stale=true")
    assert code == 0 and "Traceback" not in printed, printed
    assert "job 0: already done" in printed and "2/2 jobs recorded: 2 ok" in printed, printed
    assert "1 already done (resumed, 1 of them STALE)" in printed, printed
    assert "STALE (measured by a jacbench that did not record its code" in printed
    assert "Recommended: " in printed and not lines, lines
    (summary,) = sorted(tmp_path.glob("multirun/*/*/summary.parquet"))
    rows = pd.read_parquet(summary).set_index("strategy")
    assert rows.loc["jacrev", "resumed"] and rows.loc["jacrev", "tier"] == ""
    assert rows.loc["jacrev", "stale"].startswith("measured by a jacbench that did not record")
    assert rows.loc["jacfwd", "stale"] == ""
    (report,) = tmp_path.glob("multirun/*/*/report/report.md")
    assert "| first (STALE) |" in report.read_text()  # the report says which figure is stale


def test_a_sweep_under_another_sweeper_is_one_line(launch, tmp_path):
    code, lines, printed = launch("-m", "hydra/sweeper=basic", "strategy=jacrev", "report=false")
    assert code == 1 and "Traceback" not in printed, printed
    assert lines == [
        "jacbench: this sweep was not opened by jacbench's sweeper: sweep with "
        "hydra/sweeper=jacbench (the default)"
    ]
    assert not (tmp_path / "results").exists()
