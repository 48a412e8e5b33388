"""Idle against busy: the same sweeps run on a quiet machine and beside busy processes, and
whether they name the same winners (issue 57).

Four sweeps, as a user types them: ``+experiment=seed002``, ``+experiment=seed004`` narrowed
to three strategies, a 16-job plain sweep and a 2x2 map. Each runs once idle and once beside
``--per-core`` busy processes per core (pure-Python loops, started here and always stopped).
Per problem it prints the leader, its gap to the runner-up, whether the rule settled it and
by which time (wall or CPU); then the agreement of the winners wherever the idle gap is at
least 1.3x, and the share of problems the busy run settles where the idle gap is 2x or more.
The machine's load average is printed before and during each run: on a shared machine
"idle" is only as idle as the neighbours let it be.

    python scripts/busy_verdicts.py [--per-core 2] [--only seed002,plain16]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SWEEPS: dict[str, list[str]] = {
    "seed002": ["+experiment=seed002"],
    "seed004": ["+experiment=seed004", "strategy=functional,jacfwd,jacrev"],
    "plain16": [
        "-m",
        "strategy=jacrev,jacfwd,functional,autograd_loop",
        "dtype=float32,float64",
        "model.n_out=8,96",
        "timing=quick",
    ],
    "map2x2": [
        "+experiment=map",
        "model=map_dense",
        "model.n_in=24,300",
        "model.n_out=24,300",
        "dtype=float32",
        "strategy=jacrev,jacfwd,functional,autograd_loop,auto_eager",
    ],
}
COMMON = ["mlflow.enabled=false", "report=false"]
AGREE_GAP = 1.3  # winners must agree where the idle gap is at least this
SETTLE_GAP = 2.0  # the busy run must settle where the idle gap is at least this


@contextlib.contextmanager
def busy(processes: int) -> Iterator[list[subprocess.Popen]]:
    """``processes`` busy loops beside the caller, each stopped (by its own id) on the way
    out, whatever happened inside."""
    started: list[subprocess.Popen] = []
    try:
        for _ in range(processes):
            started.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield started
    finally:
        for proc in started:
            proc.kill()
        for proc in started:
            proc.wait()


@dataclass(frozen=True)
class Verdict:
    """What one sweep said of one problem (``auto`` left out: it runs one of the others)."""

    problem: str
    leader: str
    runner_up: str
    gap: float | None  # runner-up / leader, on the basis the rule compared them by
    settled: bool
    by: str  # wall or cpu


def verdicts(results: Path) -> dict[str, Verdict]:
    """Each problem's verdict from the rows under ``results`` (a sweep's results folder)."""
    from jacbench.record.parquet import read_results
    from jacbench.report.analysis import recommend
    from jacbench.report.problems import normalise, problems

    rows, _ = normalise(read_results(results))
    rows = rows[~rows["strategy"].astype(str).str.startswith("auto")]
    found = {}
    for title, group in problems(rows):
        rec = recommend(title, group)
        if rec.best is None:
            continue
        found[title] = Verdict(
            title,
            rec.best,
            rec.runner_up or "",
            rec.runner_up_slower,
            not rec.unsettled,
            rec.by,
        )
    return found


def run_sweep(args: list[str], folder: Path) -> float:
    """The sweep as a user types it, in ``folder``; its wall seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jacbench", *args, *COMMON],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


@dataclass(frozen=True)
class Figures:
    """Agreement of the winners and the busy run's settled share, with their counts."""

    agree: int
    agree_of: int
    settled: int
    settled_of: int

    def text(self) -> str:
        def share(k: int, n: int) -> str:
            return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "0/0 (-)"

        return (
            f"winners agree where the idle gap >= {AGREE_GAP}x: "
            f"{share(self.agree, self.agree_of)}; "
            f"busy settles where the idle gap >= {SETTLE_GAP}x: "
            f"{share(self.settled, self.settled_of)}"
        )


def figures(idle: dict[str, Verdict], loaded: dict[str, Verdict]) -> Figures:
    """Winners of the busy run against the idle one's, where the idle gap says there is one."""
    agree = agree_of = settled = settled_of = 0
    for problem, quiet in idle.items():
        other = loaded.get(problem)
        if other is None or quiet.gap is None:
            continue
        if quiet.gap >= AGREE_GAP:
            agree_of += 1
            agree += other.leader == quiet.leader
        if quiet.gap >= SETTLE_GAP:
            settled_of += 1
            settled += other.settled and other.leader == quiet.leader
    return Figures(agree, agree_of, settled, settled_of)


def _line(v: Verdict | None) -> str:
    if v is None:
        return "-"
    gap = f"{v.gap:.2f}x" if v.gap else "-"
    state = "settled" if v.settled else "unsettled"
    return f"{v.leader} over {v.runner_up or '-'} {gap} {state} by {v.by}"


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-core", type=int, default=2, help="busy processes per core")
    parser.add_argument("--only", default=",".join(SWEEPS), help="sweeps to run")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    processes = args.per_core * (os.cpu_count() or 1)
    totals = Figures(0, 0, 0, 0)
    for name in names:
        with tempfile.TemporaryDirectory() as idle_dir, tempfile.TemporaryDirectory() as busy_dir:
            before = load()
            idle_s = run_sweep(SWEEPS[name], Path(idle_dir))
            with busy(processes):
                busy_s = run_sweep(SWEEPS[name], Path(busy_dir))
                during = load()
            idle = verdicts(Path(idle_dir) / "results")
            loaded = verdicts(Path(busy_dir) / "results")
        print(
            f"== {name}: idle {idle_s:.0f} s (load {before}), beside {processes} busy "
            f"processes {busy_s:.0f} s (load {during})"
        )
        for problem in idle:
            print(f"  {problem}\n    idle: {_line(idle[problem])}")
            print(f"    busy: {_line(loaded.get(problem))}")
        found = figures(idle, loaded)
        print(f"  {found.text()}")
        totals = Figures(
            *(a + b for a, b in zip(vars(totals).values(), vars(found).values(), strict=True))
        )
    print(f"all: {totals.text()}")


if __name__ == "__main__":
    main()
