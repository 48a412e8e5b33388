"""Per-job overhead of a sweep, and a single run's start-up against its floor.

Runs the same 16-job sweep (4 strategies x 2 dtypes x 2 models) with the basic launcher and
with joblib (n_jobs=2), each in a fresh folder, and prints

    overhead per job = (sweep wall time - measured work / parallel workers) / jobs

where the measured work is the sum of the jobs' ``measure_s`` (time spent running the
strategy: first call, timing and memory); that figure spreads the sweep's fixed costs
(imports, the MLflow parent run, summary and report) over its jobs, so the marginal cost of
one more job is printed beside it: the 32-job sweep against the 16-job one, the same four
problems (seeds 0 and 1 of each job; a report shows each problem once), so that neither the
first call of a new model nor a new section of the report counts as a job's cost
(target, issue 11: at most 0.25 s per job in a basic sweep; issue 29: at most 0.2 s). The
basic sweep's ``between jobs`` (median start-to-start gap less the job's measure_s) reads the
same cost off one sweep, with far less noise than the difference of two sweeps.

A single run (``python -m jacbench timing=quick``, MLflow on, its folder's database made by
an earlier run) and ``--help`` are timed against the floor in alternating rounds: a bare
interpreter that imports torch and computes one ``torch.func.jacrev`` (torch imports its
compiler on the first one). Target (issue 45): a single run's wall at most floor + measure_s
+ 2.0 s, with the run recorded in MLflow when the command returns, and ``--help`` under 3 s.
Wall and CPU (user + system) are both printed: on a busy machine wall time mostly measures
the others' load. Beside them: the same floor with Python's collector off (as jacbench's
start-up has it, ``jacbench.run.collector``), MLflow's own floor (import, open a sqlite
store), paid in the run's process, and a first run in a fresh folder (MLflow builds its
database). ``--baseline SRC`` times another checkout's ``src`` (e.g. an earlier commit's,
``git archive``) in the same rounds, side by side.
A bare Hydra app (its one job does nothing) is timed as it starts in this environment and
with jacbench's sweeper plugin hidden from Hydra's plugin scan, in alternating rounds
(issue 29: installing jacbench must not slow down other Hydra apps).
Usage: python scripts/sweep_overhead.py [--baseline SRC] [--start-up-only] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jacbench.record.parquet import read_results

GRID = [
    "strategy=jacrev,jacfwd,fd_central,functional",
    "dtype=float32,float64",
    "model=mlp,seed003_cat_poly",
    "timing=quick",
]
SEEDS = {16: "seed=0", 32: "seed=0,1"}  # jobs: seeds swept
TORCH_FLOOR = "import torch; torch.func.jacrev(torch.sin)(torch.ones(3))"
FLOOR_NAME = "floor: torch + first torch.func call"
FLOORS = {
    FLOOR_NAME: TORCH_FLOOR,
    "the same, collector paused": f"import gc; gc.disable(); {TORCH_FLOOR}",
    "mlflow + open a sqlite store": (
        "import sys, mlflow; mlflow.MlflowClient(tracking_uri='sqlite:///' + sys.argv[1])"
        ".search_experiments(max_results=1)"
    ),
}
TARGET_PER_JOB = 0.25  # seconds (issue 11)
TARGET_SINGLE_EXTRA_S = 2.0  # a single run: at most floor + measure_s + this (issue 45)
TARGET_HELP_S = 3.0  # --help (issue 45)
ROUNDS = 5
LAUNCHERS = {
    "basic": ([], 1),
    "joblib n_jobs=2": (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 2),
}


def between_jobs(rows) -> float:
    """Median time from one job's start to the next one's, less the first one's measure_s
    (jobs run one after the other): a job's own overhead, read off one sweep, which the
    difference of two sweeps' walls (``one more job``) estimates with far more noise. The
    first gap (the sweep's first job: its first imports and calls) is left out."""
    rows = rows.sort_values("started_at")
    starts = rows["started_at"].astype("int64").to_numpy() / 1e6
    work = rows["measure_s"].to_numpy()
    return statistics.median(starts[2:] - starts[1:-1] - work[1:-1])


def measure(extra: list[str], jobs: int) -> tuple[float, float, int, float]:
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
        return wall, work, len(rows), between_jobs(rows)


@dataclass
class Timed:
    """Wall and CPU seconds (user + system, the process and its children) of one command."""

    wall: float
    cpu: float


def timed(command: list[str], cwd: str, env: dict[str, str] | None = None) -> Timed:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Timed(wall, cpu)


def tree_env(src: str | None) -> dict[str, str]:
    """The environment that runs jacbench from ``src`` (None: the installed one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    if src:
        env["PYTHONPATH"] = src
    return env


def single_run(folder: str, env: dict[str, str]) -> tuple[Timed, float]:
    """(time, measure_s) of one ``python -m jacbench timing=quick`` in ``folder``."""
    took = timed([sys.executable, "-m", "jacbench", "timing=quick"], folder, env)
    rows = read_results(Path(folder) / "results")
    return took, float(rows.sort_values("started_at")["measure_s"].iloc[-1])


def floor(code: str, folder: str) -> Timed:
    """A bare interpreter running ``code`` (given a database path, opened once before)."""
    command = [sys.executable, "-c", code, f"{folder}/mlflow.db"]
    subprocess.run(command, check=True, capture_output=True)
    return timed(command, folder)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s [{min(values):.2f}-{max(values):.2f}]"


def start_up_against_the_floor(rounds: int = ROUNDS, baseline: str | None = None) -> None:
    """Single runs, ``--help`` and the floors in alternating rounds (the machine is noisy);
    with ``baseline``, that tree's in the same rounds."""
    trees = {"this tree": None, **({"baseline": baseline} if baseline else {})}
    seen: dict[str, list[Timed]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, src in trees.items():  # each tree's database made once, before timing
            os.makedirs(f"{folder}/{name}")
            single_run(f"{folder}/{name}", tree_env(src))
        for _ in range(rounds):
            for what, code in FLOORS.items():
                seen.setdefault(what, []).append(floor(code, folder))
            for name, src in trees.items():
                took, work = single_run(f"{folder}/{name}", tree_env(src))
                seen.setdefault(f"{name}: single run - measure_s", []).append(
                    Timed(took.wall - work, took.cpu - work)
                )
                with tempfile.TemporaryDirectory() as fresh:
                    took, work = single_run(fresh, tree_env(src))
                seen.setdefault(f"{name}: first run in a new folder - measure_s", []).append(
                    Timed(took.wall - work, took.cpu - work)
                )
                help_ = [sys.executable, "-m", "jacbench", "--help"]
                seen.setdefault(f"{name}: --help", []).append(timed(help_, folder, tree_env(src)))
    base = seen[FLOOR_NAME]
    print(
        f"start-up ({rounds} alternating rounds, medians [range]; load "
        f"{os.getloadavg()[0]:.2f}); target: single run - measure_s <= floor + "
        f"{TARGET_SINGLE_EXTRA_S:.1f} s, --help < {TARGET_HELP_S:.1f} s"
    )
    for what, times in seen.items():
        walls, cpus = [t.wall for t in times], [t.cpu for t in times]
        above = ""
        if "single run" in what or "first run" in what:
            extra = statistics.median(walls) - statistics.median(t.wall for t in base)
            extra_cpu = statistics.median(cpus) - statistics.median(t.cpu for t in base)
            above = f"  above the floor: wall {extra:+.2f} s, CPU {extra_cpu:+.2f} s"
        print(f"  {what:48s} wall {_median(walls)}  CPU {_median(cpus)}{above}")


BARE_APP = """
import os, sys
import hydra
hide = sys.argv.pop() == "hide"
if hide:  # jacbench's plugins out of Hydra's scan, as if it were not installed
    import hydra_plugins
    paths = hydra_plugins.__path__
    hydra_plugins.__path__ = [p for p in paths if not os.path.isdir(p + "/jacbench_sweeper")]
@hydra.main(version_base="1.3", config_path=None)
def main(cfg):
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper
    found = [p.__module__ for p in Plugins.instance().discover(Sweeper)]
    assert any("jacbench" in m for m in found) != hide, found
main()
"""


def hydra_neighbour(rounds: int = 12) -> None:
    """A bare Hydra app's start-up with jacbench's plugins scanned and hidden (issue 29)."""
    walls: dict[str, list[float]] = {"with jacbench's plugins": [], "hidden": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for what, times in walls.items():
                flag = "hide" if what == "hidden" else "scan"
                command = [sys.executable, "-c", BARE_APP, f"hydra.run.dir={folder}", flag]
                start = time.perf_counter()
                subprocess.run(command, cwd=folder, check=True, capture_output=True)
                times.append(time.perf_counter() - start)
    print(
        f"a bare Hydra app ({rounds} alternating rounds, medians; load "
        f"{os.getloadavg()[0]:.2f}): "
        + ", ".join(
            f"{what} {statistics.median(t):.3f} s [{min(t):.3f}-{max(t):.3f}]"
            for what, t in walls.items()
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another checkout's src, timed side by side")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--start-up-only", action="store_true", help="no sweeps")
    args = parser.parse_args()
    start_up_against_the_floor(args.rounds, args.baseline)
    if args.start_up_only:
        return
    hydra_neighbour()
    print(
        f"{'launcher':18s} {'jobs':>4s} {'wall [s]':>9s} {'work [s]':>9s} "
        f"{'overhead/job [s]':>17s} {'one more job [s]':>17s} {'between jobs [s]':>17s}"
    )
    (small, large) = SEEDS
    for name, (extra, workers) in LAUNCHERS.items():
        overheads = {}
        for jobs in (small, large):
            wall, work, recorded, between = measure(extra, jobs)
            overheads[jobs] = wall - work / workers
            per_job = overheads[jobs] / recorded
            marginal = (
                (overheads[large] - overheads[small]) / (large - small) if jobs == large else None
            )
            print(
                f"{name:18s} {recorded:4d} {wall:9.2f} {work:9.2f} {per_job:17.3f} "
                + (f"{marginal:17.3f}" if marginal is not None else " " * 17)
                + (f" {between:17.3f}" if workers == 1 else " " * 18)
                + f"  (x the 0.25 s target: overhead/job {per_job / TARGET_PER_JOB:.2f}"
                + (f", one more job {marginal / TARGET_PER_JOB:.2f})" if marginal else ")")
            )


if __name__ == "__main__":
    main()
