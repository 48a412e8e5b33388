"""Issue 59: one truth. An accuracy preset's (seed001: timing=none) sweep run says what the
console says, and a parquet row read by plain pandas carries the id of its MLflow run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from helpers.results import frame, make_result
from jacbench.record.mlflow_run import Tracking
from jacbench.record.parquet import write_result
from jacbench.report.analysis import recommend
from jacbench.report.overview import overview
from jacbench.report.problems import problems
from jacbench.run.recording import track


def _accuracy_rows() -> pd.DataFrame:
    """seed001's shape: finite differences over eps, nothing timed, some within tolerance."""
    rows = []
    for dtype in ("float32", "float64"):
        for k, eps in enumerate((1e-1, 1e-3, 1e-5, 1e-7)):
            for strategy in ("fd_forward", "fd_central"):
                err = 10.0 ** -(k + (6 if dtype == "float64" else 2))
                rows.append(
                    make_result(
                        strategy=strategy,
                        strategy_kind="approximate",
                        dtype=dtype,
                        strategy_options=json.dumps({"eps": eps}),
                        time_median_s=None,
                        time_iqr_s=None,
                        n_timed=0,
                        rel_err=err,
                        within_tol=err < 1e-4,
                        config_hash=f"{dtype}{strategy}{eps}",
                        job_id=f"{dtype}{strategy}{k}",
                    ).__dict__
                )
    return frame(*rows)


def test_an_accuracy_presets_sweep_run_says_what_the_console_says():
    rows = _accuracy_rows()
    view = overview(rows)
    sentences = [recommend(title, group).sentence() for title, group in problems(rows)]
    description = view.description.replace("\\[", "[").replace("\\]", "]")
    flat = " ".join(description.split())
    for sentence, (_, group) in zip(sentences, problems(rows), strict=True):
        within = int(group["within_tol"].sum())
        assert f"{within} of {len(group)} within tolerance" in sentence
        assert " ".join(sentence.split()) in flat  # the sweep run's line is the console's
    assert "none within tolerance" not in flat
    assert "within tolerance" not in view.tags["recommended_strategy"]
    for answer in view.answers:
        assert "none within tolerance" not in answer["name"]


def test_a_row_read_by_plain_pandas_carries_its_mlflow_run_id(tmp_path: Path):
    folder = tmp_path / "results"
    result = make_result()
    row = write_result(result, folder)
    assert pd.read_parquet(folder)["mlflow_run_id"].tolist() == [""]  # on disk first
    tracking = Tracking(f"sqlite:///{tmp_path / 'mlflow.db'}", "jacbench", tmp_path.as_uri())
    run_id = track(result, tracking, "", row)
    assert re.fullmatch(r"[0-9a-f]{32}", run_id)
    assert pd.read_parquet(folder)["mlflow_run_id"].tolist() == [run_id]
    assert sorted(p.name for p in folder.glob("*.parquet")) == [row.name]  # rewritten in place
