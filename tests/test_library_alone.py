"""The library wing alone (issue 61): in a fresh venv with torch, numpy and scipy and no
`bench` extra, ``jacbench.prepare`` works, ``python -m jacbench.check`` passes an outside
plugin, and ``python -m jacbench`` names the extra it needs in one line."""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "jacbench-complex-step"
BENCH = ("hydra", "omegaconf", "yaml", "pandas", "pyarrow", "matplotlib", "mlflow", "rich")
PREPARE = """
import torch, jacbench
x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
J = jacbench.prepare(torch.sin, x)(x)
assert torch.allclose(J, torch.diag(torch.cos(x))), J
print(jacbench.jacobian(lambda v: v * v, x, "jacfwd").diagonal().tolist())
"""


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def library_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with torch, numpy, scipy, jacbench (--no-deps) and the complex-step plugin."""
    env_dir = tmp_path_factory.mktemp("library-alone") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    deps = _run(python, "-m", "pip", "install", "-q", "torch==2.13.0", "numpy", "scipy", cwd=ROOT)
    if deps.returncode != 0:  # jacbench's own installs below must succeed wherever these do
        last = (deps.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"pip cannot reach a package index for torch, numpy and scipy: {last}")
    for path in (ROOT, PLUGIN):
        done = _run(python, "-m", "pip", "install", "-q", "--no-deps", "-e", str(path), cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.mark.slow  # a venv, torch installed into it
def test_the_library_and_the_plugin_contract_run_without_the_benchmarks_packages(
    library_python: Path, tmp_path: Path
):
    code = f"import importlib.util as u; print([m for m in {BENCH!r} if u.find_spec(m)])"
    present = _run(library_python, "-c", code, cwd=tmp_path)
    assert present.stdout.strip() == "[]", present.stdout + present.stderr

    prepared = _run(library_python, "-c", PREPARE, cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr[-3000:]

    check = _run(library_python, "-m", "jacbench.check", "complex_step", "jacrev", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert "complex_step right_at_two_points[mlp-params] passed" in check.stdout
    assert "all checks passed or skipped with a reason" in check.stdout

    bench = _run(library_python, "-m", "jacbench", cwd=tmp_path)
    assert bench.returncode == 1
    (line,) = bench.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("jacbench: the benchmark needs its extra (no module "), line
    assert line.endswith('pip install "jacbench[bench]"'), line
