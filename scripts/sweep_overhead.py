"""Per-job overhead of a sweep: launcher, imports, problem and reference, recording.

Runs the same 16-job sweep (4 strategies x 2 dtypes x 2 models) with the basic launcher and
with joblib (n_jobs=2), each in a fresh folder, and prints

    overhead per job = (sweep wall time - measured work / parallel workers) / jobs

where the measured work is the sum of the jobs' ``measure_s`` (time spent running the
strategy: first call, timing and memory), and a single run's start-up

    start-up = wall time of ``python -m jacbench timing=quick`` - its measure_s

split into the import of jacbench's command (torch, Hydra, MLflow, pandas) and the rest
(config, problem and reference, MLflow run, parquet, console). Targets (issue 11): at most
0.25 s per job in a basic sweep, at most 2.5 s single-run start-up on a 2-core machine.
Usage: python scripts/sweep_overhead.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jacbench.recorders.parquet import read_results

GRID = [
    "strategy=jacrev,jacfwd,fd_central,functional",
    "dtype=float32,float64",
    "model=mlp,seed003_cat_poly",
    "timing=quick",
]
LAUNCHERS = {
    "basic": ([], 1),
    "joblib n_jobs=2": (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 2),
}


def measure(extra: list[str], workers: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jacbench", "-m", *GRID, *extra],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        rows = read_results(Path(folder) / "results")
        work = float(rows["measure_s"].sum())
        return wall, work, len(rows)


def single_run() -> tuple[float, float, float]:
    """(wall, measure_s, import seconds) of one ``python -m jacbench timing=quick``."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import jacbench.app"], check=True, cwd=folder)
        imports = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jacbench", "timing=quick"],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        rows = read_results(Path(folder) / "results")
        return wall, float(rows["measure_s"].sum()), imports


def main() -> None:
    wall, work, imports = single_run()
    print(
        f"single run: wall {wall:.2f} s, measure_s {work:.2f} s, start-up {wall - work:.2f} s "
        f"(target 2.5 s: {(wall - work) / 2.5:.2f}x), of which importing jacbench.app "
        f"{imports:.2f} s"
    )
    print(
        f"{'launcher':18s} {'jobs':>4s} {'wall [s]':>9s} {'work [s]':>9s} {'overhead/job [s]':>17s}"
    )
    for name, (extra, workers) in LAUNCHERS.items():
        wall, work, jobs = measure(extra, workers)
        overhead = (wall - work / workers) / jobs
        print(
            f"{name:18s} {jobs:4d} {wall:9.2f} {work:9.2f} {overhead:17.3f}"
            f"  ({overhead / 0.25:.2f}x the 0.25 s target)"
        )


if __name__ == "__main__":
    main()
