"""Per-job overhead of a sweep: launcher, imports, problem and reference, recording.

Runs the same 16-job sweep (4 strategies x 2 dtypes x 2 models) with the basic launcher and
with joblib (n_jobs=2), each in a fresh folder, and prints

    overhead per job = (sweep wall time - measured work / parallel workers) / jobs

where the measured work is the sum of the jobs' ``measure_s`` (time spent running the
strategy: first call, timing and memory); that figure spreads the sweep's fixed costs
(imports, the MLflow parent run, summary and report) over its jobs, so the marginal cost of
one more job is printed beside it: the 32-job sweep against the 16-job one, the same four
problems (seeds 0 and 1 of each job; a report shows each problem once), so that neither the
first call of a new model nor a new section of the report counts as a job's cost. A single
run's start-up

    start-up = wall time of ``python -m jacbench timing=quick`` - its measure_s

split into the import of jacbench's command (torch, Hydra, MLflow, pandas) and the rest
(config, problem and reference, MLflow run, parquet, console), with the floor no jacbench
change can go under printed beside it: a bare interpreter that imports torch and computes one
``torch.func.jacrev`` (torch imports its compiler on the first one), and one that imports
MLflow and opens a sqlite store. Targets (issue 11): at most 0.25 s per job in a basic
sweep, at most 2.5 s single-run start-up on a 2-core machine.
Usage: python scripts/sweep_overhead.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jacbench.record.parquet import read_results

GRID = [
    "strategy=jacrev,jacfwd,fd_central,functional",
    "dtype=float32,float64",
    "model=mlp,seed003_cat_poly",
    "timing=quick",
]
SEEDS = {16: "seed=0", 32: "seed=0,1"}  # jobs: seeds swept
FLOORS = {
    "torch + first torch.func call": ("import torch; torch.func.jacrev(torch.sin)(torch.ones(3))"),
    "mlflow + open a sqlite store": (
        "import sys, mlflow; mlflow.MlflowClient(tracking_uri='sqlite:///' + sys.argv[1])"
        ".search_experiments(max_results=1)"
    ),
}
TARGET_PER_JOB = 0.25  # seconds (issue 11)
LAUNCHERS = {
    "basic": ([], 1),
    "joblib n_jobs=2": (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 2),
}


def measure(extra: list[str], jobs: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jacbench", "-m", *GRID, SEEDS[jobs], *extra],
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
        subprocess.run([sys.executable, "-c", "import jacbench.run.app"], check=True, cwd=folder)
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


def floor(code: str) -> float:
    """Wall time of a bare interpreter running ``code`` (given a database path), the second
    time: the first creates the database, which jacbench copies from a template instead."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-c", code, f"{folder}/mlflow.db"]
        subprocess.run(command, check=True, capture_output=True)
        start = time.perf_counter()
        subprocess.run(command, check=True)
        return time.perf_counter() - start


def main() -> None:
    wall, work, imports = single_run()
    print(
        f"single run: wall {wall:.2f} s, measure_s {work:.2f} s, start-up {wall - work:.2f} s "
        f"(target 2.5 s: {(wall - work) / 2.5:.2f}x), of which importing jacbench.run.app "
        f"{imports:.2f} s"
    )
    floors = {name: floor(code) for name, code in FLOORS.items()}
    print(
        "floor, in bare interpreters: "
        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in floors.items())
        + f"; together {sum(floors.values()):.2f} s = {sum(floors.values()) / 2.5:.2f}x the target"
    )
    print(
        f"{'launcher':18s} {'jobs':>4s} {'wall [s]':>9s} {'work [s]':>9s} "
        f"{'overhead/job [s]':>17s} {'one more job [s]':>17s}"
    )
    (small, large) = SEEDS
    for name, (extra, workers) in LAUNCHERS.items():
        overheads = {}
        for jobs in (small, large):
            wall, work, recorded = measure(extra, jobs)
            overheads[jobs] = wall - work / workers
            per_job = overheads[jobs] / recorded
            marginal = (
                (overheads[large] - overheads[small]) / (large - small) if jobs == large else None
            )
            print(
                f"{name:18s} {recorded:4d} {wall:9.2f} {work:9.2f} {per_job:17.3f} "
                + (f"{marginal:17.3f}" if marginal is not None else " " * 17)
                + f"  (x the 0.25 s target: overhead/job {per_job / TARGET_PER_JOB:.2f}"
                + (f", one more job {marginal / TARGET_PER_JOB:.2f})" if marginal else ")")
            )


if __name__ == "__main__":
    main()
