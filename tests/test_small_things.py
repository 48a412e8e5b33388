"""Issue 59's small things a newcomer trips on: each fixed where it shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.results import frame, make_result, timed_row
from jacbench.experiments import seed004
from jacbench.report.build import write_report
from jacbench.report.display import make_console, result_table
from jacbench.report.overview import jobs_table

ROOT = Path(__file__).resolve().parents[1]


def test_the_readmes_model_option_example_changes_the_model():
    example = re.search(r"model\.hidden=(\d+)", (ROOT / "README.md").read_text())
    assert example is not None
    default = yaml.safe_load((ROOT / "conf/model/mlp.yaml").read_text())["hidden"]
    assert int(example.group(1)) != default


def test_a_report_folder_is_ignored_by_git():
    lines = (ROOT / ".gitignore").read_text().split()
    assert "/report/" in lines  # the report command's folder at the top
    assert "report/" not in lines  # a bare pattern would hide src/jacbench/report too


@pytest.mark.slow
def test_help_names_every_launcher_hydra_offers():
    def typed(flag: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "jacbench", flag], capture_output=True, text=True, cwd=ROOT
        ).stdout

    offered = re.search(r"^hydra/launcher: (.+)$", typed("--hydra-help"), re.M)
    assert offered is not None
    helped = typed("--help")
    assert "hydra/launcher" in helped
    for name in offered.group(1).split(", "):
        assert re.search(rf"\b{name}\b", helped), name


def test_a_noisy_single_run_keeps_its_table_narrow():
    warning = (
        "WARNING: Interquartile range is 34.1% of the median measurement.\n"
        "           This suggests significant environmental influence."
    )
    console = make_console()  # a pipe: 160 columns to fill
    with console.capture() as captured:
        console.print(result_table(make_result(timing_warning=warning)))
    printed = captured.get()
    assert "34.1%" in printed
    assert max(len(line) for line in printed.splitlines()) <= 122


def test_the_summary_table_carries_each_interval_and_round():
    rows = frame(
        timed_row("jacrev", 1.0, 0.05),
        timed_row("jacfwd", 2.0, 0.05, round="side_by_side", pair_id="p"),
    )
    table = jobs_table(rows)
    for name in ("time_ci_low", "time_ci_high", "time_median"):
        assert list(table[f"{name}_ms"]) == pytest.approx(list(rows[f"{name}_s"] * 1e3))
    assert list(table["round"]) == ["first", "side_by_side"]


def test_the_report_says_where_its_rows_were_measured(tmp_path: Path):
    rows = [
        make_result(torch_version="2.13.0", code_digest="d1", job_id="a" * 16).__dict__,
        make_result(
            strategy="jacfwd", torch_version="2.12.1", code_digest="d2", job_id="b" * 16
        ).__dict__,
    ]
    write_report(frame(*rows), tmp_path)
    text = (tmp_path / "report.md").read_text()
    section = text.split("## Environment", 1)[1]
    for value in ("2.13.0", "2.12.1", "d1", "d2", "test CPU", "test-host"):
        assert value in section, value


def test_seed004_says_an_unsettled_default_plainly():
    common = {"model": "seed004_small", "n_in": 15, "n_out": 55, "within_tol": True}
    rows = frame(
        timed_row("fd_forward_loop", 1.0, 0.5, strategy_mode="numeric", **common),
        timed_row("functional", 1.05, 0.5, **common),  # overlapping intervals: unsettled
    )
    text = seed004.answer(rows)
    assert "takes not settled" not in text
    assert "functional against fd_forward_loop: not settled" in text


@pytest.mark.slow  # a process of its own: torch warns once per process
def test_a_csr_sparse_run_says_nothing_of_torchs_beta_csr_support(cli):
    """torch warns that CSR support is in beta on every sparse run with output=csr: nothing
    the user can act on. jacbench hides that one warning where it builds the CSR answer."""
    proc = cli(
        "strategy=sparse_jacfwd",
        "strategy.output=csr",
        "model=burgers",
        "model.n=16",
        "mlflow.enabled=false",
        "timing=quick",
        subprocess=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    assert "Sparse CSR tensor support is in beta" not in proc.stdout + proc.stderr
    assert "UserWarning" not in proc.stderr, proc.stderr
