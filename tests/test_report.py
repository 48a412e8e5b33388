"""Reports read only recorded rows: recommendation, comparison, plots, mixed sets, CLI."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from helpers.cli import QUICK
from helpers.results import make_result
from helpers.tracking import mlflow_runs
from jacbench.record.parquet import read_results, write_result
from jacbench.report import plots
from jacbench.report.__main__ import main as report_main
from jacbench.report.analysis import recommend
from jacbench.report.build import CAPTIONS, write_report
from jacbench.report.compare import compare
from jacbench.report.problems import normalise, problems


def frame(*results) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in results])


JOB_IDS = itertools.count()  # each hand-built row its own job, as real rows are


def job(strategy: str, seconds: float, ok: bool = True, **changes):
    return make_result(
        strategy=strategy,
        time_median_s=seconds,
        time_iqr_s=seconds * 0.02,
        within_tol=ok,
        config_hash=f"{strategy}-{changes.get('dtype', 'float32')}-"
        f"{changes.get('n_in', 3)}-{changes.get('strategy_options', '')}",
        job_id=f"{next(JOB_IDS):016d}",
        **changes,
    )


def test_recommendation_picks_the_fastest_strategy_within_tolerance():
    rows, _ = normalise(
        frame(
            job("fd_forward", 1e-5, ok=False, strategy_kind="approximate"),  # fastest, but wrong
            job("naive_single_grad", 2e-5, strategy_kind="negative_control"),
            job("jacfwd", 3e-5),
            job("jacrev", 4e-5),
            job("functional", 3e-4),
        )
    )
    ((title, group),) = problems(rows)
    choice = recommend(title, group)
    assert choice.best == "jacfwd" and choice.runner_up == "jacrev"
    assert choice.runner_up_slower == pytest.approx(4 / 3)
    assert choice.speedup_vs_default == pytest.approx(10)
    assert "use **jacfwd**" in choice.sentence()


def test_compare_flags_a_real_slowdown_and_not_noise():
    before = frame(job("jacrev", 1e-4), job("jacfwd", 2e-4))
    after = frame(
        job("jacrev", 2e-4),  # a real 2x slowdown, IQRs of 2%
        make_result(
            strategy="jacfwd",
            time_median_s=2.04e-4,
            time_iqr_s=1e-5,
            config_hash=before.iloc[1]["config_hash"],
            job_id="f" * 16,
        ),
    )
    pairs, geomean = compare(before, after)
    flags = dict(zip(pairs["strategy_after"], pairs["flag"], strict=True))
    assert flags == {"jacrev": "slower", "jacfwd": "same"}
    assert geomean == pytest.approx((2 * 1.02) ** 0.5)


def test_compare_is_unsure_where_a_side_waited_for_its_core():
    """CI: the same sweep beside a CPU-bound process measured jacfwd 1.51x slower in CPU time,
    the intervals apart; its CPU/wall showed that the process had waited for its core."""
    before = frame(job("jacrev", 1e-4))
    loaded = dict(strategy="jacrev", time_median_s=2e-4, config_hash=before.iloc[0]["config_hash"])
    for cpu_wall, flag in ((1.0, "slower"), (0.6, "unsure (contended after)")):
        after = frame(make_result(**loaded, job_id="f" * 16, cpu_wall_ratio=cpu_wall))
        pairs, _ = compare(before, after)
        assert list(pairs["flag"]) == [flag]


def test_compare_matches_by_problem_and_strategy_when_hashes_differ():
    before = frame(job("jacrev", 2e-4))
    after = frame(
        make_result(
            strategy="jacrev",
            time_median_s=1e-4,
            time_iqr_s=1e-6,
            config_hash="other",
            job_id="e" * 16,
        )
    )
    pairs, _ = compare(before, after)
    assert list(pairs["matched_by"]) == ["problem and strategy"]
    assert list(pairs["flag"]) == ["faster"]


def sweep_like_rows() -> pd.DataFrame:
    """Hand-built: an eps sweep, a shape sweep (N/M) for both modes, two dtypes."""
    rows = []
    for eps, err in ((1e-1, 1e-2), (1e-3, 1e-5), (1e-5, 1e-6), (1e-7, 1e-3)):
        rows.append(
            job(
                "fd_forward",
                1e-4,
                strategy_kind="approximate",
                strategy_mode="numeric",
                rel_err=err,
                strategy_options=json.dumps({"eps": eps}),
            )
        )
    for n in (4, 16, 64):
        for strategy, mode, t in (("jacfwd", "forward", n * 1e-6), ("jacrev", "reverse", 1e-5)):
            rows.append(job(strategy, t, strategy_mode=mode, n_in=n, n_out=16))
    rows.append(job("jacrev", 1e-5, dtype="float64", err_eps=0.5))
    return frame(*rows)


@pytest.mark.slow  # ~5 s: every plot drawn and read back
def test_every_plot_is_a_valid_image_with_the_expected_series(tmp_path: Path, monkeypatch):
    rows, _ = normalise(sweep_like_rows())
    real, figures = plots.all_plots, {}

    def keep(*args):  # the figures write_report draws, kept to look at their series
        figures.update(real(*args))
        return figures

    monkeypatch.setattr(plots, "all_plots", keep)
    written = write_report(rows, tmp_path)
    maps = {name for name in CAPTIONS if name.startswith("map_")}  # one axis swept here
    assert set(figures) == set(CAPTIONS) - {"sparsity_pattern"} - maps  # no sparse strategy
    labels = {name: fig.axes[0].get_legend_handles_labels()[1] for name, fig in figures.items()}
    assert labels["fd_error_vs_eps"] == ["fd_forward float32 (mlp)"]
    assert sorted(labels["time_vs_shape"]) == ["forward (mlp float32)", "reverse (mlp float32)"]
    legend = [t.get_text() for t in figures["accuracy_per_strategy"].legends[0].get_texts()]
    assert {"float32", "float64"} <= set(legend)  # colour: the dtype
    assert any(t.startswith("mlp (N=") for t in legend)  # a marker for each problem
    assert len(figures["time_per_strategy"].axes) == len(problems(rows))
    eps_line = figures["fd_error_vs_eps"].axes[0].get_lines()[0]
    assert list(eps_line.get_xdata()) == [1e-7, 1e-5, 1e-3, 1e-1]
    for name in figures:
        image = mpimg.imread(tmp_path / f"{name}.png")
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert {p.name for p in written} >= {"report.md", "report.html"}


def test_a_mixed_result_set_still_gives_a_report(tmp_path: Path):
    results = tmp_path / "results"
    write_result(make_result(strategy="jacrev"), results)
    write_result(
        make_result(
            strategy="jacrev",
            status="failed",
            error_message="boom: CUDA OOM",
            time_median_s=None,
            within_tol=None,
            job_id="a" * 16,
            config_hash="x",
        ),
        results,
    )
    old = pa.Table.from_pylist(
        [
            {
                "model": "mlp",
                "strategy": "jacrev",
                "status": "ok",
                "dtype": "float32",
                "device": "cpu",
                "n_in": 3,
                "n_out": 2,
                "time_median_s": 1e-4,
            }
        ]
    )
    pq.write_table(old, results / "old.parquet")
    write_report(results, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Columns missing from (older) result files" in text and "config_hash" in text
    assert "Only one strategy was measured" in text
    assert "boom: CUDA OOM" in text
    assert "Not drawn" in text  # no eps or shape sweep here, and the report says so


@pytest.mark.slow  # over 10 s: a real sweep or a subprocess per run
def test_report_cli_on_a_real_sweep_and_the_parent_run_carries_it(cli, tmp_path: Path, capsys):
    proc = cli(
        "-m",
        "strategy=jacrev,jacfwd,functional",
        "dtype=float32,float64",
        "model=mlp,seed003_cat_poly",
        *QUICK,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    (summary,) = cli.summaries()
    assert (summary.parent / "report" / "report.html").is_file()
    (parent,), _ = mlflow_runs(cli.tracking_uri)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(cli.tracking_uri)
    report_files = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {
        "report/report.html",
        "report/report.md",
        "report/time_per_strategy.png",
    } <= report_files

    out = tmp_path / "rep"
    # the command in process (its own process: test_report_cli_refuses_a_missing_folder)
    assert report_main([str(cli.folder / "results"), "--out", str(out)]) == 0
    assert "report.html" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # time, accuracy, speed-vs-accuracy
    markdown = (out / "report.md").read_text()
    headings = [line for line in markdown.splitlines() if line.startswith("### ")]
    # 4 problems; a rules-of-thumb section only where the rule settles the modes (not under
    # a load that leaves the losers contended); no map (no model spans both N and M)
    assert len([h for h in headings if h != "### Rules of thumb"]) == 4, headings
    assert len(read_results(cli.folder / "results")) == 12

    results = str(cli.folder / "results")
    assert report_main(["--compare", results, results, "--out", str(out)]) == 0
    same = capsys.readouterr().out
    assert "12 matched jobs, compared by CPU time per call: 12 same." in same
    assert "slower" not in same


def test_the_report_command_checks_its_arguments_before_importing_torch_pandas_matplotlib():
    """Reports are made from parquet rows alone: ``python -m jacbench.report`` never imports
    torch (``jacbench``'s own names are imported on first use), and pandas and matplotlib
    only once its arguments are good, so a mistyped folder is refused at once."""
    heavy = ("torch", "pandas", "matplotlib")
    code = (
        "import sys, jacbench.report.__main__ as cli\n"
        "try:\n    cli.main(['no/such/folder'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]" and "is not a folder of jacbench results" in done.stderr


@pytest.mark.slow  # the real `python -m jacbench.report` process; in process: test_bad_inputs
def test_report_cli_refuses_a_missing_folder(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "jacbench.report", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "is not a folder of jacbench results" in proc.stderr


def test_sparse_rows_get_a_spy_plot_and_their_colour_count(tmp_path: Path):
    tridiagonal = (torch.ones(5, 5).triu(-1).tril(1) * 2.0).reshape(-1).tolist()
    sparse = job(
        "sparse_jacfwd",
        1e-5,
        model="burgers",
        n_in=5,
        n_out=5,
        n_colors=3,
        pattern_density=13 / 25,
        jacobian=tridiagonal,
    )
    rows, _ = normalise(frame(sparse, job("jacfwd", 3e-5, model="burgers", n_in=5, n_out=5)))
    figure = plots.all_plots(rows, problems(rows))["sparsity_pattern"]
    assert "burgers: 3 colours (sparse_jacfwd)" in figure.axes[0].get_title()
    spied = figure.axes[0].get_images()[0].get_array()
    assert spied.astype(bool).tolist() == (torch.tensor(tridiagonal).reshape(5, 5) != 0).tolist()
    write_report(rows, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert "sparse_jacfwd (3 colours)" in markdown and "sparsity_pattern.png" in markdown


@pytest.mark.slow  # two real sweeps, one beside a CPU-bound process: ~40 s
def test_the_same_sweep_beside_a_competing_process_compares_with_no_flag(cli, capsys):
    """Issue 26: the same sweep run twice, unchanged, printed '1 faster, 5 slower'. Here the
    second run shares the machine with a real CPU-bound process."""
    sweep = ["-m", "strategy=jacrev,jacfwd", "dtype=float32,float64", *QUICK, "report=false"]
    first = cli(*sweep, "results_dir=quiet", "mlflow.enabled=false", timeout=600)
    assert first.returncode == 0, first.stderr
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        second = cli(*sweep, "results_dir=loaded", "mlflow.enabled=false", timeout=600)
    finally:
        burner.kill()
        burner.wait()
    assert second.returncode == 0, second.stderr
    before, after = (str(cli.folder / name) for name in ("quiet", "loaded"))
    assert report_main(["--compare", before, after, "--out", str(cli.folder / "cmp")]) == 0
    text = capsys.readouterr().out
    verdict = text.splitlines()[0]
    assert verdict.startswith("4 matched jobs") and "faster" not in verdict, text
    assert "slower" not in verdict, text


def test_report_help_says_what_it_writes_and_what_it_reads(capsys):
    from jacbench.report.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for said in ("report.md", "report.html", "PNG and SVG", "multirun/<date>/<time>/"):
        assert said in text, said


def _one_row(path: Path, **changes) -> None:
    table = pa.Table.from_pylist([{**vars(make_result()), **changes}])
    pq.write_table(table, path)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"time_median_s": float("nan")}, "an ok row without a time"),
        ({"time_median_s": -1.0}, "time_median_s is -1.0"),
        ({"time_iqr_s": -1.0}, "time_iqr_s is negative"),
        ({"status": "weird"}, "status 'weird' is not one of failed, ok, skipped"),
        ({"drop_times": True}, "an ok row without a time"),
    ],
)
def test_a_row_the_report_cannot_use_is_named_and_skipped(tmp_path, capsys, changes, said):
    """Issue 32: each of these valid-parquet rows gave a traceback (`--compare` too)."""
    for folder in ("before", "after"):
        results = tmp_path / folder
        write_result(make_result(strategy="jacfwd", job_id=f"{folder}-good"), results)
        bad = {k: v for k, v in changes.items() if k != "drop_times"}
        _one_row(results / "bad.parquet", job_id=f"{folder}-bad", **bad)
        if "drop_times" in changes:
            table = pq.read_table(results / "bad.parquet")
            kept = [c for c in table.column_names if not c.startswith("time_")]
            pq.write_table(table.select(kept), results / "bad.parquet")
    assert report_main([str(tmp_path / "after"), "--out", str(tmp_path / "report")]) == 0
    assert said in capsys.readouterr().err
    assert "jacfwd" in (tmp_path / "report" / "report.md").read_text()  # the good row
    args = ["--compare", str(tmp_path / "before"), str(tmp_path / "after")]
    assert report_main([*args, "--out", str(tmp_path / "cmp")]) == 0
    assert said in capsys.readouterr().err


def test_foreign_files_and_copies_are_not_counted_as_jobs(tmp_path, capsys):
    results = tmp_path / "results"
    path = write_result(make_result(), results)
    for copy in range(2):
        (results / f"copy{copy}.parquet").write_bytes(path.read_bytes())
    pq.write_table(pa.table({"a": [1, 2], "b": [3, 4]}), results / "foreign.parquet")
    assert report_main([str(results), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 row(s), copies of a row already counted" in err
    assert "foreign.parquet (not a jacbench result" in err
    assert (results / ".quarantine" / "foreign.parquet").exists()
    assert "1 recorded jobs" in (tmp_path / "report" / "report.md").read_text()


def test_compare_opens_with_one_verdict_line_and_writes_html_beside_markdown(tmp_path):
    """Issue 44: compare printed a bare 'geometric-mean ratio 1.22' with no headline verdict,
    did not say which time it compared, and was markdown only."""
    from jacbench.record.parquet import write_result
    from jacbench.report.compare import compare_report

    before_dir, after_dir = tmp_path / "before", tmp_path / "after"
    same = dict(config_hash="s", strategy="jacfwd", strategy_mode="forward")
    write_result(make_result(time_median_s=1e-4, config_hash="a", job_id="1" * 16), before_dir)
    write_result(make_result(time_median_s=1e-4, job_id="2" * 16, **same), before_dir)
    write_result(make_result(time_median_s=3e-4, config_hash="a", job_id="3" * 16), after_dir)
    write_result(make_result(time_median_s=1.01e-4, job_id="4" * 16, **same), after_dir)
    path, verdict = compare_report(before_dir, after_dir, tmp_path / "out")
    assert verdict == "2 matched jobs, compared by CPU time per call: 1 slower, 1 same."
    text = path.read_text()
    assert text.splitlines()[2] == f"**{verdict}**"  # the first thing under the title
    page = (tmp_path / "out" / "compare.html").read_text()
    assert verdict in page and "<table>" in page
