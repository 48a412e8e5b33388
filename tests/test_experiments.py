"""The forum questions as one-command experiments, in reduced form: each test asserts the
phenomenon through the recorded rows of the sweep, and that an answer was written."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from helpers.cli import NO_MLFLOW, QUICK, load_script
from helpers.tracking import mlflow_runs


def run_experiment(cli, name: str, *overrides: str) -> tuple[pd.DataFrame, str]:
    proc = cli(f"+experiment={name}", *overrides, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (summary,) = cli.summaries()
    markdown = (summary.parent / "answer.md").read_text()
    # The answer's own paragraph first (a viewer's first screen), then the whole answer in
    # a fenced block, so MLflow's markdown viewer keeps its columns.
    assert markdown.startswith(f"# Answer: {name}\n\nAnswer: ") and markdown.endswith("```\n")
    lead, answer = markdown.split("```text\n", 1)
    answer = answer.rsplit("```", 1)[0]
    assert " ".join(lead.split("\n\n")[1].split()) in " ".join(answer.split())
    assert answer.startswith(name) and "Answer:" in answer and "Answer:" in proc.stdout
    assert_documented_alike(name, answer)
    return pd.read_parquet(summary), answer


def assert_documented_alike(name: str, answer: str) -> None:
    """The docs' sample of this experiment (scripts/doc_samples.py) has the title and the
    table columns the code prints now: a stale sample fails here (run the script again)."""
    doc_samples = load_script("doc_samples")
    documented = [
        found[name]
        for document in doc_samples.documents()
        if name in (found := doc_samples.samples(document.read_text()))
    ]
    assert documented, f"no sample of {name} in the docs: add one (scripts/doc_samples.py)"
    for sample in documented:
        assert sample.splitlines()[0] == answer.splitlines()[0], sample
        assert columns(answer) <= columns(sample), (columns(answer), columns(sample))


def columns(text: str) -> set[tuple[str, ...]]:
    """The column names of each table in an answer (those that are not numbers, such as a
    swept step, which a narrowed run has fewer of)."""

    def named(cell: str) -> bool:
        try:
            float(cell)
        except ValueError:
            return True
        return False

    return {
        tuple(cell for cell in re.split(r"\s{2,}", line.strip()) if named(cell))
        for line in text.splitlines()
        if re.match(r"(dtype|strategy)\s{2,}", line)
    }


def recorded_jacobian(row: pd.Series) -> torch.Tensor:
    return torch.tensor(list(row["jacobian"]), dtype=torch.float64).reshape(
        int(row["n_out"]), int(row["n_in"])
    )


@pytest.mark.slow  # over 10 s: a real sweep or a subprocess per run
def test_seed000_backward_and_jacobian_sum_agree_to_rounding(cli):
    rows, answer = run_experiment(cli, "seed000", "seed=0,1", *NO_MLFLOW)
    assert set(rows["status"]) == {"ok"}
    assert len(rows) == 16 + 4 * 2  # 16 jobs, and each problem's pair re-timed (two rows)
    rows = rows[rows["round"] == "first"].copy()
    rows["reduce"] = rows["model_options"].str.contains('"reduce": "sum"')
    for dtype, bound in (("float32", 1e-6), ("float64", 1e-15)):
        for seed in (0, 1):
            pick = rows[(rows["dtype"] == dtype) & (rows["seed"] == seed)]
            backward = pick[pick["reduce"] & (pick["strategy"] == "autograd_loop")].iloc[0]
            full = pick[~pick["reduce"] & (pick["strategy"] == "functional")].iloc[0]
            diff = (recorded_jacobian(backward)[0] - recorded_jacobian(full).sum(0)).abs().max()
            assert diff < bound
            assert backward["err_eps"] <= 10 and full["err_eps"] <= 10
    assert "both are right to within rounding" in answer


@pytest.mark.slow  # over 10 s: a real sweep or a subprocess per run
def test_seed001_float32_forward_difference_fails_at_the_threads_step(cli):
    rows, answer = run_experiment(
        cli, "seed001", "strategy=fd_forward", "strategy.eps=1e-3", *NO_MLFLOW
    )
    by_dtype = rows.set_index("dtype")
    assert by_dtype.loc["float32", "n_in"] == 16800
    assert by_dtype.loc["float32", "rel_err"] > 0.1
    assert by_dtype.loc["float64", "rel_err"] < 1e-2
    assert "Why eps=1e-3 fails in float32" in answer
    # an accuracy question (timing=none): nothing timed, and no verdict on speed drawn
    assert (rows["n_timed"] == 0).all() and rows["time_median_s"].isna().all()
    assert "Timed again side by side" not in answer
    report = next(cli.folder.glob("multirun/*/*/report/report.md")).read_text()
    assert "an accuracy question (timing=none): nothing was timed" in report


@pytest.mark.slow  # 5-10 s: a forum experiment's whole sweep and report
def test_seed002_autograd_and_hand_formula_both_within_rounding(cli):
    rows, answer = run_experiment(cli, "seed002", "seed=0,1", *NO_MLFLOW)
    assert set(rows["strategy"]) == {"analytic", "autograd_loop", "jacrev"}
    # the formula is the reference, except for the formula itself (judged by reverse mode)
    expected = rows["strategy"].map({"analytic": "reverse_float64"}).fillna("analytic")
    assert (rows["reference_method"] == expected).all()
    assert (rows["err_eps"] <= 4).all()
    f32 = rows[rows["dtype"] == "float32"]
    assert (f32["max_abs_err"] > 0).any()  # rounding is visible in float32, not hidden
    assert "neither is wrong" in answer


@pytest.mark.slow  # 5-10 s: a forum experiment's whole sweep and report
def test_seed003_naive_single_grad_is_flagged_and_the_fixes_are_right(cli):
    rows, answer = run_experiment(cli, "seed003", *QUICK)
    verdict = rows.groupby("strategy")["within_tol"].all()  # both rounds' rows
    assert not verdict["naive_single_grad"]
    assert verdict["jacrev"] and verdict["grads_batched"] and verdict["autograd_loop"]
    (parent,), _ = mlflow_runs(cli.tracking_uri)
    from mlflow.tracking import MlflowClient

    paths = {a.path for a in MlflowClient(cli.tracking_uri).list_artifacts(parent.info.run_id)}
    assert "answer.md" in paths
    assert "is_grads_batched=True" in answer


@pytest.mark.slow  # 5-10 s: a forum experiment's whole sweep and report
def test_seed004_all_strategies_on_both_shapes(cli):
    rows, answer = run_experiment(
        cli, "seed004", "strategy=functional,fd_forward_loop,jacfwd,jacrev", *QUICK, *NO_MLFLOW
    )
    assert len(rows) == 12 and set(rows["status"]) == {"ok"}  # 8 jobs, a pair per problem
    rows = rows[rows["round"] == "first"]
    shapes = rows.groupby("model")[["n_in", "n_out"]].first()
    assert tuple(shapes.loc["seed004_lm"]) == (84, 576)
    assert tuple(shapes.loc["seed004_small"]) == (15, 55)
    exact = rows[rows["strategy_kind"] == "exact"]
    assert exact["within_tol"].all()
    assert "functional takes" in answer and "(the thread: 7-8x)" in answer
    assert "fastest exact" in answer
    # the top two of each problem were timed again, interleaved, before a winner was named
    assert "Timed again side by side before naming a winner:" in answer
    prose = " ".join(answer.split())  # answer.md wraps its prose lines
    assert prose.count("timed side by side (12 interleaved blocks each, job ") == 2
