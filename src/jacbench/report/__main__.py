"""``python -m jacbench.report RESULTS [--out DIR]`` and
``python -m jacbench.report --compare BEFORE AFTER [--out DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jacbench.report",
        description=(
            "Tables, plots and a recommendation from jacbench's recorded rows: writes "
            "report.md, report.html (plots embedded) and each plot as PNG and SVG into --out. "
            "Nothing is re-run."
        ),
        epilog=(
            "RESULTS is a folder of parquet rows: results/ (every single run), or a sweep's "
            "folder multirun/<date>/<time>/ (its summary.parquet). --compare writes "
            "compare.md: what changed between two such folders, beyond the noise. --history "
            "writes history.md/html/png: each strategy's time across several folders."
        ),
    )
    parser.add_argument(
        "results", nargs="?", type=Path, help="results/ or a sweep folder (parquet files)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("report"), help="output folder (default: report/)"
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="compare two results folders instead",
    )
    parser.add_argument(
        "--history",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="each strategy's time across these folders (torch or jacbench versions, machines)",
    )
    args = parser.parse_args(argv)
    folders = args.compare or args.history or ([args.results] if args.results else [])
    if not folders:
        parser.error("give a results folder, --compare BEFORE AFTER, or --history DIR DIR ...")
    if args.history and len(args.history) < 2:
        parser.error("--history needs two folders or more, in the order of their versions")
    for folder in folders:
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder of jacbench results")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file; give a folder (created if missing)")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: cannot create the folder ({exc.strerror})")
    # pandas and matplotlib (seconds) only once the arguments are known to be good
    from jacbench.report.build import write_report
    from jacbench.report.compare import compare_report

    if args.history:
        from jacbench.report.history import history_report

        path, lines = history_report(args.history, args.out)
        print("\n".join(lines))
        print(f"written: {path}, {path.with_suffix('.html')}")
        return 0
    if args.compare:
        path, verdict = compare_report(*args.compare, args.out)
        print(verdict)
        print(f"written: {path} and {path.with_suffix('.html')}")
        return 0
    from jacbench.record.parquet import read_results
    from jacbench.report.console import print_findings
    from jacbench.report.display import make_console
    from jacbench.report.screen import screen

    rows = screen(read_results(args.results))
    print_findings(rows, make_console())
    written = write_report(rows, args.out)
    print(
        f"written: {', '.join(str(p) for p in written if p.suffix in ('.md', '.html'))} "
        f"and {sum(p.suffix == '.png' for p in written)} figures (PNG and SVG) in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
