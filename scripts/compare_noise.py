"""Does ``python -m jacbench.report --compare`` cry wolf? The same 16-job sweep (two models x
four strategies x two dtypes) is run three times in fresh folders: twice on the machine as it
is, once with a competing CPU-bound process beside it. Compare then reads quiet -> quiet and
quiet -> loaded; every row it flags faster or slower is a false alarm, since the code did not
change. Prints the flags, each sweep's wall time and the machine's load.

    python scripts/compare_noise.py                    # this checkout
    python scripts/compare_noise.py --src OTHER/src    # another checkout's code (before/after)
    python scripts/compare_noise.py --timing default   # the default timing instead of quick
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = [
    "-m",
    "model=mlp,seed004_lm",
    "strategy=jacrev,jacfwd,functional,fd_forward",
    "dtype=float32,float64",
    "report=false",
    "mlflow.enabled=false",
]
FLAGS = ("faster", "slower")


def run_sweep(folder: Path, results: str, timing: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jacbench", *SWEEP, f"timing={timing}", f"results_dir={results}"],
        cwd=folder,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def flagged(folder: Path, a: str, b: str, env: dict[str, str]) -> tuple[int, int]:
    """(rows flagged faster or slower, rows compared) in compare.md's table."""
    out = folder / f"compare_{a}_{b}"
    subprocess.run(
        [sys.executable, "-m", "jacbench.report", "--compare", a, b, "--out", str(out)],
        cwd=folder,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in (out / "compare.md").read_text().splitlines()
        if line.startswith("|") and not line.startswith("|--") and "strategy" not in line
    ]
    rows = [r for r in rows if len(r) > 5 and not set(r[0]) <= {"-", ":"}]
    for r in rows:
        if r[5] in FLAGS:
            print(f"  flagged {a} -> {b}: " + " | ".join(r[:7]))
    return sum(r[5] in FLAGS for r in rows), len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, help="run this src/ folder's jacbench instead")
    parser.add_argument("--timing", default="quick", choices=["quick", "default"])
    args = parser.parse_args()
    env = dict(os.environ, MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true")
    if args.src:
        env["PYTHONPATH"] = str(args.src.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        times = {"quiet1": run_sweep(folder, "quiet1", args.timing, env)}
        times["quiet2"] = run_sweep(folder, "quiet2", args.timing, env)
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            times["loaded"] = run_sweep(folder, "loaded", args.timing, env)
        finally:
            burner.kill()
            burner.wait()
        same = flagged(folder, "quiet1", "quiet2", env)
        loaded = flagged(folder, "quiet1", "loaded", env)
    print(f"code: {args.src or 'this checkout'}; timing={args.timing}; {os.cpu_count()} cores")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    for name, seconds in times.items():
        print(f"sweep {name}: {seconds:.1f} s wall (16 jobs)")
    print(f"compare quiet -> quiet : {same[0]} of {same[1]} rows flagged")
    print(f"compare quiet -> loaded: {loaded[0]} of {loaded[1]} rows flagged")


if __name__ == "__main__":
    main()
