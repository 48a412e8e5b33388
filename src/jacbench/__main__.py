"""``python -m jacbench`` and the ``jacbench`` script: jacbench's ``main`` with the garbage
collector off while it starts (``jacbench.run.collector``: why, and when it is on)."""

import sys

from jacbench.run.collector import Collector

# What the benchmark imports beyond the library (pyproject's `bench` extra), by import name.
BENCH_MODULES = ("hydra", "omegaconf", "yaml", "pandas", "pyarrow", "matplotlib", "mlflow", "rich")


def command() -> None:
    collector = Collector.off_for_start_up()
    try:
        try:
            from jacbench.run.app import main
        except ModuleNotFoundError as exc:  # the library alone: one line, not a traceback
            if (exc.name or "").split(".")[0] not in BENCH_MODULES:
                raise
            print(
                f"jacbench: the benchmark needs its extra (no module {exc.name!r}): "
                'pip install "jacbench[bench]"',
                file=sys.stderr,
            )
            sys.exit(1)
        main(collector)
    finally:
        collector.end()


if __name__ == "__main__":
    command()
