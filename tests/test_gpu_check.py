"""scripts/gpu_check.py: the checks a GPU user relies on (run on a GPU where there is one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from helpers.cli import load_script

CUDA = torch.cuda.is_available()


def run_script(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    script = load_script("gpu_check")
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *args])
    with pytest.raises(SystemExit) as exit_:
        script.main()
    return exit_.value.code


@pytest.mark.skipif(CUDA, reason="a CUDA device is visible")
def test_without_cuda_it_says_so_and_exits_2(monkeypatch, capsys):
    assert run_script(monkeypatch) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_timing_is_compared_round_by_round_so_one_busy_spell_cannot_fail_it():
    alternating_ratio = load_script("gpu_check").alternating_ratio
    ours = iter([5.0, 5.0, 5.0, 5.0, 5.0]).__next__
    theirs = iter([15.0, 5.0, 5.0, 5.5, 4.5]).__next__  # the machine was busy in round one
    ratio, ratios = alternating_ratio(ours, theirs, rounds=5)
    assert ratios[0] == pytest.approx(1 / 3) and len(ratios) == 5
    assert ratio == 1.0


def checks_passed(output: str) -> list[str]:
    lines = [line for line in output.splitlines() if line.startswith(("ok  ", "FAIL"))]
    assert [line for line in lines if line.startswith("FAIL")] == []
    return [line.split(":")[0][4:].strip() for line in lines]


@pytest.mark.slow
def test_every_check_runs_and_passes_on_the_cpu(monkeypatch, capsys, tmp_path: Path):
    """The script's machinery end to end without a GPU: real sweeps, parquet and MLflow."""
    assert run_script(monkeypatch, "--device", "cpu", "--out", str(tmp_path)) == 0
    names = checks_passed(capsys.readouterr().out)
    assert names == [
        "timing",
        "memory",
        "precision sweep",
        "exact strategies within tolerance",
        "device names",
        "two jobs at a time on one device",
    ]
    assert len(list((tmp_path / "precision" / "results").glob("*.parquet"))) == 9


@pytest.mark.slow
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_every_check_passes_on_the_gpu(monkeypatch, capsys, tmp_path: Path):
    assert run_script(monkeypatch, "--out", str(tmp_path)) == 0
    names = checks_passed(capsys.readouterr().out)
    assert "TF32 off is no less accurate than on" in names


@pytest.mark.slow  # ~40 s: 12 jobs and a report, then resumed
def test_the_map_check_draws_the_three_heat_maps_on_the_cpu(monkeypatch, capsys, tmp_path):
    """`--map` on a narrowed grid: the map preset through the CLI, its heat maps in the report
    (on a GPU the same check runs the whole map: `--map`)."""
    args = ["--device", "cpu", "--out", str(tmp_path), "--map-only", "--map-sizes", "4,16"]
    narrowed = ["model=map_dense", "dtype=float32", "strategy=jacfwd,jacrev,auto_eager"]
    assert run_script(monkeypatch, *args, "--map-args", *narrowed) == 0
    output = capsys.readouterr().out
    assert checks_passed(output) == ["the map"]
    assert "12 jobs, 0 failed; heat maps 3/3" in output
    # run again into the same folder, as after a timeout on a GPU lease: the map resumes in a
    # second sweep folder and the check reads the newest one (it read exactly one before)
    assert run_script(monkeypatch, *args, "--map-args", *narrowed) == 0
    output = capsys.readouterr().out
    assert "Reused 12 row(s)" in output and "12 jobs, 0 failed; heat maps 3/3" in output
    assert len(list(tmp_path.glob("map/multirun/*/*/report"))) == 2
