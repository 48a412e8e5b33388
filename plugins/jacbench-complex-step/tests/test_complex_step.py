"""The plugin is discovered through its entry point and computes a correct Jacobian."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jacbench import StrategySkip
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import reference_jacobian
from jacbench.core.registry import load_registry
from jacbench.record.parquet import read_results

MLP = {"_target_": "jacbench.models.mlp.MLP", "n_in": 5, "hidden": 7, "n_out": 3}


def test_plugin_is_registered_from_its_own_package():
    registry = load_registry()
    assert registry.get("complex_step").name == "complex_step"
    assert registry.packages["complex_step"] == "jacbench-complex-step"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_step_matches_reference_to_rounding(dtype):
    problem = build_problem({**MLP, "activation": "tanh"}, dtype, torch.device("cpu"), seed=1)
    reference, _ = reference_jacobian(problem)
    jac = load_registry().prepare("complex_step", problem)(problem.x)
    rel = torch.linalg.norm(jac.double() - reference) / torch.linalg.norm(reference)
    assert jac.dtype == dtype
    assert rel < 20 * torch.finfo(dtype).eps


def test_complex_step_through_relu_is_skipped_with_reason():
    problem = build_problem({**MLP, "activation": "relu"}, torch.float64, torch.device("cpu"), 0)
    with pytest.raises(StrategySkip, match="complex"):
        load_registry().prepare("complex_step", problem)


def run_cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jacbench", "timing=quick", "mlflow.enabled=false", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # over 10 s: a real sweep or a subprocess per run
def test_installed_plugin_runs_as_a_strategy_choice(tmp_path: Path):
    ok = run_cli(tmp_path, "strategy=complex_step", "dtype=float64")
    assert ok.returncode == 0, ok.stderr
    skipped = run_cli(tmp_path, "strategy=complex_step", "model.activation=relu")
    assert skipped.returncode == 1 and "accept complex input" in skipped.stderr
    rows = read_results(tmp_path / "results").sort_values("status")
    assert list(rows["status"]) == ["ok", "skipped"]
    assert rows.iloc[0]["rel_err"] < 1e-13 and rows.iloc[0]["strategy"] == "complex_step"
