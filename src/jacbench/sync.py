"""``python -m jacbench.sync [RESULTS]``: catch MLflow up once tracking is back. Sweeps'
parent runs left RUNNING (tracking down at the sweep's end, or the sweep killed) are closed
with their files and their jobs' runs (``jacbench.run.sweep.repair``); then every row of
RESULTS without a run gets one (``jacbench.record.sync``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jacbench.record.mlflow_run import Tracking
from jacbench.record.sync import sync_rows
from jacbench.record.text import one_line
from jacbench.run.sweep.repair import close_left_open


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jacbench.sync",
        description="Log MLflow runs for result rows recorded while tracking was down, and "
        "close sweeps' parent runs left open.",
    )
    parser.add_argument("results", nargs="?", type=Path, default=Path("results"))
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///<this folder>/mlflow.db",
    )
    parser.add_argument("--experiment", default="jacbench")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a folder of jacbench results")
    tracking = Tracking.resolve(Path.cwd(), args.tracking_uri, args.experiment)
    paths = sorted(args.results.glob("*.parquet"))
    try:
        for line in close_left_open(tracking):
            print(line)
    except Exception as exc:
        print(
            f"jacbench: MLflow tracking failed ({tracking.uri}): {type(exc).__name__}: "
            f"{one_line(exc)}; {len(paths)} file(s) not checked: run python -m jacbench.sync "
            "again when tracking is back",
            file=sys.stderr,
        )
        return 1
    logged, failed = sync_rows(paths, tracking)
    print(f"{logged} row(s) without an MLflow run now have one in {tracking.uri}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
