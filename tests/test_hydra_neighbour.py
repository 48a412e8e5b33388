"""Installing jacbench does not slow down other Hydra apps (issue 29): Hydra imports every
``hydra_plugins`` module at the start-up of any app, so jacbench's sweeper plugin must import
nothing heavy at module level."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.cli import load_script

HEAVY = ("torch", "pandas", "pyarrow", "submitit", "mlflow", "jacbench", "joblib", "numpy")
APP = """
import os
import sys

import hydra
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper


@hydra.main(version_base="1.3", config_path=None)
def main(cfg):
    names = [p.__module__ for p in Plugins.instance().discover(Sweeper)]
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(os.environ["HEAVY"].split(",")))
    print("PLUGINS", ",".join(sorted(names)))
    print("HEAVY", ",".join(heavy))


main()
"""


def test_a_bare_hydra_app_imports_nothing_of_jacbench_beyond_its_plugin_modules(tmp_path: Path):
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = subprocess.run(
        [sys.executable, str(app), f"hydra.run.dir={tmp_path / 'out'}"],
        env={**os.environ, "HEAVY": ",".join(HEAVY)},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert "hydra_plugins.jacbench_sweeper.sweeper" in lines["PLUGINS"]  # discovered
    assert lines["HEAVY"].strip() == "", f"imported at Hydra start-up: {lines['HEAVY']}"


def test_the_benchmark_compares_against_an_app_that_does_not_see_jacbench(capsys):
    """sweep_overhead's bare app fails unless its hidden variant really misses jacbench's
    plugins and its other variant finds them."""
    load_script("sweep_overhead").hydra_neighbour(rounds=1)
    assert "with jacbench's plugins" in capsys.readouterr().out
