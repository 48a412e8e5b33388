"""What a reviewer sees in the MLflow UI: readable job runs, a parent run that answers, and
(slow, needs Chromium and Playwright) the real UI in a headless browser."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.cli import QUICK, load_script
from helpers.results import make_result
from helpers.tracking import answer_runs, mlflow_runs, seed_store
from jacbench.record.mlflow_run import Tracking, connect, describe_experiment, log_result
from jacbench.report.overview import jobs_table, overview
from jacbench.run.sweep.opening import sweep_name, swept_keys


def _tracking(tmp_path: Path) -> Tracking:
    seed_store(tmp_path)  # a copy of a database MLflow built once for the test process
    return Tracking.resolve(tmp_path, None, "jacbench")


def test_job_run_logs_only_measurements_as_metrics_in_readable_units(tmp_path: Path):
    started = datetime.now(timezone.utc) - timedelta(seconds=20)
    result = make_result(
        rel_err=3.70650037123e-8, started_at=started, n_in=84, n_out=576, tolerance=1.2e-5
    )
    tracking = _tracking(tmp_path)
    run = MlflowClient(tracking.uri).get_run(
        log_result(result, tracking, {"hidden": 64, "input_shape": None}, {"eps": None})
    )
    metrics, params, tags = run.data.metrics, run.data.params, run.data.tags
    assert set(metrics) == {
        "time_median_ms",
        "time_iqr_ms",
        "time_ci_low_ms",
        "time_ci_high_ms",
        "n_blocks",
        "n_timed",
        "cpu_median_ms",
        "cpu_wall_ratio",
        "load_avg_1m",
        "first_call_ms",
        "measure_ms",
        "peak_mem_mib",
        "max_abs_err",
        "rel_err",
        "log10_rel_err",
        "err_eps",
        "within_tol",
        # for MLflow's linear chart axes: bars that grow with the time and the error, and
        # the time under its problem's key (the Chart tab's section per key prefix)
        "log10_time_us",
        "log10_err_eps",
        "mlp N84 M576 float32 cpu/log10_time_us",
    }
    assert metrics["time_median_ms"] == 0.1  # 1e-4 s
    assert metrics["log10_time_us"] == 2.0 and metrics["log10_err_eps"] >= 0
    assert metrics["rel_err"] == 3.707e-8  # 4 significant digits: the table shows all of them
    assert metrics["log10_rel_err"] == pytest.approx(math.log10(3.7065e-8), abs=1e-3)
    for constant in ("n_in", "n_out", "batch", "seed", "threads", "tolerance"):
        assert constant in params and constant not in metrics, constant
    assert params["n_in"] == "84" and params["tolerance"] == "1.2e-05"
    assert "None" not in params.values() and "model.input_shape" not in params
    assert params["model.hidden"] == "64"
    assert run.info.run_name.startswith("jacrev f32 ")
    assert tags["problem"] == "mlp N=84 M=576 float32 cpu"
    # identifiers are tags, not params compare-runs would offer as axes; the machine is named
    assert tags["config_hash"] == "abc" and "config_hash" not in params
    assert tags["cpu_model"] and "load_avg_1m" in metrics
    assert tags["round"] == "first" and tags["hostname"] == "test-host"  # what made the row
    # The run spans the job's real start and end, not the moment it was recorded.
    assert run.info.start_time == int(started.timestamp() * 1000)
    assert run.info.end_time - run.info.start_time >= 19_000
    (dataset,) = run.inputs.dataset_inputs
    assert dataset.dataset.name == "mlp N=84 M=576 float32 cpu"
    assert json.loads(dataset.dataset.profile)["N"] == 84


def test_runs_table_can_be_filtered_by_problem(tmp_path: Path):
    tracking = _tracking(tmp_path)
    for dtype in ("float32", "float64"):
        for strategy in ("jacrev", "jacfwd"):
            log_result(make_result(dtype=dtype, strategy=strategy), tracking, {}, {})
    client = MlflowClient(tracking.uri)
    experiment = client.get_experiment_by_name("jacbench")
    runs = client.search_runs(
        [experiment.experiment_id], "dataset.name = 'mlp N=3 M=2 float64 cpu'"
    )
    assert sorted(r.info.run_name for r in runs) == ["jacfwd f64 mlp", "jacrev f64 mlp"]


def test_experiment_gets_a_description_and_the_classic_layout_and_no_ui_state(tmp_path: Path):
    tracking = _tracking(tmp_path)
    client = MlflowClient(tracking.uri)
    experiment_id = describe_experiment(connect(tracking))
    tags = client.get_experiment(experiment_id).tags
    assert tags["mlflow.note.content"].startswith("jacbench: how fast and how accurate")
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    # no saved view: MLflow's UI state is private (CONTRIBUTING, issue 61)
    assert not [key for key in tags if key.startswith("mlflow.sharedViewState.")]
    client.set_experiment_tag(experiment_id, "mlflow.note.content", "mine")
    describe_experiment(connect(tracking))  # a user's own description is kept
    assert client.get_experiment(experiment_id).tags["mlflow.note.content"] == "mine"


def test_sweep_name_says_what_was_swept_and_when():
    keys = swept_keys(["strategy=jacrev,jacfwd", "dtype=float32,float64", "timing=quick"])
    assert keys == ["strategy", "dtype"]
    when = datetime(2026, 11, 22, 17, 40)
    assert sweep_name(keys, None, 4, when) == "strategy, dtype (4 jobs) 2026-11-22 17:40"
    assert sweep_name(["model"], "seed004", 8, when).startswith("seed004: model (8 jobs)")
    assert swept_keys(["+experiment=seed004", "strategy=glob(*)"]) == ["strategy"]


def _rows():
    import pandas as pd

    rows = [
        make_result(strategy="functional", time_median_s=8e-3),
        make_result(strategy="jacrev", time_median_s=1e-3),
        make_result(strategy="fd_central", strategy_kind="approximate", within_tol=False),
    ]
    return pd.DataFrame([r.__dict__ for r in rows])


def test_parent_overview_starts_with_the_answer_and_tags_it():
    answer = "col1  " + "x" * 900  # answer.md's lines are long: the Overview links it instead
    view = overview(_rows(), answer=answer, sweep_line="Sweep: 3 jobs", files=["answer.md"])
    first = view.description.splitlines()[0]
    assert first == "**Recommended: jacrev** (8x faster than `functional`)"
    line = "- mlp (N=3, M=2) float32 cpu: use **jacrev**, 1.00 ms \\[0.98-1.02\\], 8x faster than"
    assert line in view.description and "functional, error 1.7 eps" in view.description
    assert "x" * 200 not in view.description and "`answer.md`" in view.description
    assert max(len(line) for line in view.description.splitlines()) <= 120
    assert view.tags == {"recommended_strategy": "jacrev", "speedup_vs_functional": "8x"}


def test_a_plain_sweeps_overview_lists_only_files_it_has():
    view = overview(_rows(), files=["summary.parquet", "report/report.html"])
    assert "answer.md" not in view.description
    assert "`summary.parquet`, `report/report.html`" in view.description


def test_jobs_table_is_json_ready_in_milliseconds():
    table = jobs_table(_rows())
    assert list(table["time_median_ms"]) == [8.0, 1.0, 0.1]
    json.dumps(table.to_dict(orient="list"))  # what log_table writes
    assert "jacobian" not in table.columns
    # the answer on the viewer's first screen: time and error right after what was measured
    first = list(table.columns[:6])
    assert {"time_median_ms", "err_eps", "within_tol"} <= set(first) and first[0] == "strategy"


def test_sweep_parent_run_answers_through_the_mlflow_api(cli):
    proc = cli("-m", "strategy=jacrev,functional", *QUICK, timeout=300)
    assert proc.returncode == 0, proc.stderr
    uri = cli.tracking_uri
    (parent,), children = mlflow_runs(uri)
    assert f"mlflow ui --backend-store-uri {uri}" in proc.stdout  # where to look
    assert f"/runs/{parent.info.run_id}?workflowType=machine_learning" in proc.stdout
    table = re.search(
        r"results table: (http://127.0.0.1:5000/#/experiments/\d+/runs\S*)", proc.stdout
    )
    assert table and table[1].endswith("/runs?workflowType=machine_learning"), proc.stdout
    tags = parent.data.tags
    assert tags["mlflow.note.content"].startswith("**Recommended: ")
    settled = tags["recommended_strategy"].removesuffix(" (not settled)")  # noisy timing
    assert settled in {"jacrev", "functional", "jacrev or functional", "functional or jacrev"}
    assert parent.info.run_name.startswith("strategy (2 jobs) 20")
    client = MlflowClient(uri)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "summary_table.json" in artifacts and "answer.md" not in artifacts
    assert "answer.md" not in tags["mlflow.note.content"]  # a plain sweep has none
    assert sorted(c.info.run_name for c in children) == ["functional f32 mlp", "jacrev f32 mlp"]
    # one problem: its answer is the parent's own metrics, in the jobs' columns (issue 44)
    metrics = parent.data.metrics
    if metrics.get("settled"):
        assert {"time_median_ms", "time_ci_low_ms", "time_ci_high_ms", "err_eps"} <= set(metrics)
        assert metrics["time_ci_low_ms"] <= metrics["time_median_ms"] <= metrics["time_ci_high_ms"]
        assert metrics["exact"] == 1.0
    first = tags["mlflow.note.content"].splitlines()[0]
    assert "([the report](/#/experiments/" in first and "/artifacts/report/report.html?" in first
    assert "Chart tab" not in tags["mlflow.note.content"]
    # the figures at full size (MLflow's image cards are thumbnails), linked as artifacts,
    # each address whole on its line (the wrapping once broke them: no link in markdown)
    note = tags["mlflow.note.content"]
    assert "Figures at full size: [" in " ".join(note.split())
    link = r"\[time_per_strategy\]\(/#/experiments/\d+/runs/\w+/artifacts/report/time_per_strategy"
    assert re.search(link + r"\.png\?workflowType=machine_learning\)", note), note
    for child in children:
        assert child.info.end_time - child.info.start_time >= child.data.metrics["measure_ms"]
    # figures as MLflow images (the run's image views), not only files: the report's on the
    # parent, the problem's time figure on each job
    for run, keys in [
        (parent, {"time_per_strategy", "accuracy_per_strategy"}),
        *[(c, {"time_per_strategy"}) for c in children],
    ]:
        images = {a.path for a in client.list_artifacts(run.info.run_id, "images")}
        logged = {path.split("/", 1)[1].split("+step+")[0] for path in images}
        assert keys <= logged, (run.info.run_name, images)
        assert "mlflow.loggedImages" in client.get_run(run.info.run_id).data.tags


SWEEPS = {  # what the review test runs: a plain 8-job sweep over four problems and the
    # seed004 preset with three of its strategies (its answer, report and parent as in full:
    # the 36 jobs, auto compiling, took 3 of CI's 20 minutes; each sweep here 16 s with four
    # or five strategies; scripts/mlflow_ui_check.py reviews any sweep)
    "sweep8": ["strategy=jacrev,fd_central", "model=mlp,cnn"],
    "seed004": ["+experiment=seed004", "strategy=jacfwd,functional,fd_forward_loop"],
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "sweep",
    ["sweep8", "seed004"],
)
def test_a_reviewer_gets_the_answer_from_the_links_jacbench_prints(cli, tmp_path: Path, sweep):
    """Starts mlflow server on 127.0.0.1 and reads it in headless Chromium at 1440x900, from
    the links the sweep printed; the screenshots go to $JACBENCH_UI_SCREENSHOTS if set."""
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    script = load_script("mlflow_ui_check")
    if not Path(script.CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no chromium (apt-get install -y --no-install-recommends chromium)")
    dtypes = ["dtype=float32,float64"] if sweep == "sweep8" else []
    proc = cli("-m", *SWEEPS[sweep], *dtypes, *QUICK, timeout=900)
    assert proc.returncode == 0, proc.stderr
    db = cli.folder / "mlflow.db"
    out = Path(os.environ.get("JACBENCH_UI_SCREENSHOTS", tmp_path)) / sweep
    with script.mlflow_server(db, tmp_path / "server.log") as url:
        found = script.check_ui(url, db, out, printed=proc.stdout)
    assert found.problems == []
    names = {"runs_table", "runs_expanded", "parent_overview", "parent_images", "report"}
    assert {p.stem for p in found.screenshots} == names
    assert all(p.stat().st_size > 10_000 for p in found.screenshots)


def test_parent_overview_says_when_nothing_finished_or_the_winner_is_unsettled():
    import pandas as pd

    skipped = make_result(status="skipped", error_message="no CUDA", time_median_s=None)
    view = overview(pd.DataFrame([skipped.__dict__]))
    assert view.description.startswith("**Recommended: none finished**")
    assert "cpu: none finished: 1 skipped" in view.description
    assert "within tolerance" not in view.description.split("\n\n")[1]
    noisy = [
        make_result(strategy="jacrev", time_median_s=1.00e-3, time_iqr_s=5e-4),
        make_result(strategy="jacfwd", time_median_s=1.01e-3, time_iqr_s=5e-4),
    ]
    view = overview(pd.DataFrame([r.__dict__ for r in noisy]))
    assert "(not settled)" in view.tags["recommended_strategy"]


def test_the_headline_names_the_problem_each_recommendation_answers():
    import pandas as pd

    rows = [
        make_result(strategy="jacrev", dtype="float16", time_median_s=1e-3),
        make_result(strategy="jacfwd", dtype="float16", time_median_s=2e-3),
        make_result(strategy="jacfwd", dtype="float32", time_median_s=1e-3),
        make_result(strategy="jacrev", dtype="float32", time_median_s=2e-3),
    ]
    first = overview(pd.DataFrame([r.__dict__ for r in rows])).description.splitlines()[0]
    assert first == "**Recommended: float16: jacrev; float32: jacfwd**"
    same = [make_result(strategy="jacrev", dtype=d, time_median_s=1e-3) for d in ("float16",)]
    same += [make_result(strategy="jacrev", dtype="float32", time_median_s=1e-3)]
    first = overview(pd.DataFrame([r.__dict__ for r in same])).description.splitlines()[0]
    assert first == "**Recommended: jacrev**"


@pytest.mark.slow  # ~4 s: a sweep over three problems with MLflow
def test_several_problems_get_an_answer_run_each_and_a_time_key_each(cli):
    """Issue 44: a collapsed parent showed '-' in every number column and the charts mixed
    every problem on a linear axis: each problem's answer is a run under the sweep's, its
    figures in the jobs' columns, and each job's time is under its problem's key too (MLflow's
    Chart tab draws a section per key prefix)."""
    proc = cli("-m", "strategy=jacrev,functional", "dtype=float32,float64", *QUICK, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (parent,), children = mlflow_runs(cli.tracking_uri)
    answers = answer_runs(cli.tracking_uri)
    assert sorted(a.info.run_name.split(": ", 1)[1] for a in answers) == [
        "mlp (N=32, M=48) float32 cpu",
        "mlp (N=32, M=48) float64 cpu",
    ]
    for run in answers:
        metrics, choice = run.data.metrics, run.data.tags["recommended_strategy"]
        assert run.info.run_name.startswith(f"answer {choice}: ")
        assert run.data.tags["by"] in {"wall", "cpu"}
        # settled or not, the leader's own figures (issue 57: never '-' where it was measured)
        leader = choice.removesuffix(" (not settled)").split(" or ")[0]
        assert metrics["settled"] == (0.0 if choice.endswith("(not settled)") else 1.0)
        job = next(
            c
            for c in children
            if c.data.params.get("strategy") == leader
            and run.info.run_name.endswith(c.data.params["dtype"] + " cpu")
        )
        for key in ("time_median_ms", "time_ci_low_ms", "time_ci_high_ms", "err_eps"):
            assert metrics[key] == job.data.metrics[key]  # the leader's own figures
    for child in children:
        problem = f"mlp N32 M48 {child.data.params['dtype']} cpu"
        assert child.data.metrics[f"{problem}/log10_time_us"] == child.data.metrics["log10_time_us"]


def test_the_sweep_runs_image_cards_show_its_figures_at_full_size(tmp_path: Path):
    """MLflow's image cards show an image's ``+compressed`` copy: log_image shrinks it to
    256 px, where a figure's labels cannot be read. The sweep run's copies are the figure."""
    from PIL import Image

    from jacbench.record.mlflow_run import ParentOutcome, finish_parent_run, start_parent_run

    tracking = _tracking(tmp_path)
    figure = tmp_path / "speed_vs_accuracy.png"
    Image.new("RGB", (2200, 1400), "white").save(figure)
    run_id = start_parent_run(tracking, "sweep", {})
    outcome = ParentOutcome({"n_ok": 1.0}, images={"speed_vs_accuracy": figure})
    assert finish_parent_run(tracking, run_id, outcome) == []
    client = MlflowClient(tracking.uri)
    files = [a.path for a in client.list_artifacts(run_id, "images")]
    shown = [f for f in files if f.split(".")[0].endswith("+compressed")]  # what a card shows
    full = [f for f in files if f not in shown]
    assert len(shown) == 1 and len(full) == 1, files
    assert full[0].startswith("images/speed_vs_accuracy+step+0+timestamp+")
    for path in (*shown, *full):
        local = client.download_artifacts(run_id, path, str(tmp_path / "back"))
        with Image.open(local) as image:
            assert image.size == (2200, 1400), path
    assert client.get_run(run_id).data.tags["mlflow.loggedImages"] == "True"
