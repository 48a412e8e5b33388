"""The conf/ tree ships inside the wheel: install it in a fresh venv, run from elsewhere."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from helpers.cli import QUICK, clean_env

ROOT = Path(__file__).resolve().parents[1]


def pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", *args], check=True, capture_output=True, timeout=300
    )


@pytest.mark.slow  # builds and installs a wheel
def test_installed_wheel_runs_from_another_folder(tmp_path: Path):
    wheels = tmp_path / "wheels"
    pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT))
    (wheel,) = wheels.glob("jacbench-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Dependencies (torch, hydra, mlflow...) come from the test's own environment; a .pth
    # path is not a site dir, so the editable jacbench of that environment stays invisible.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip("install", "--no-deps", "-q", "--target", str(site), str(wheel))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [python, "-c", "import jacbench.run.config as c; print(c.__file__); print(c.conf_dir())"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(),
    ).stdout.split()
    assert all(str(site) in line for line in where), where  # the wheel, not the checkout

    proc = subprocess.run(
        [python, "-m", "jacbench", "strategy=jacfwd", "mlflow.enabled=false", *QUICK],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert list((elsewhere / "results").glob("*.parquet"))
