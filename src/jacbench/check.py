"""``python -m jacbench.check NAME [NAME ...]``: the strategy contract on installed strategies.

A plugin author runs it after ``pip install -e .``: each check (``jacbench.testing``) prints
one line, passed, skipped (and why) or failed (and why); the exit status is 1 when any check
failed, 2 for a name that is not registered (the registered names are listed).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jacbench.check",
        description="Run the strategy contract (jacbench.testing) on installed strategies.",
    )
    parser.add_argument("names", nargs="+", metavar="NAME", help="registered strategy names")
    args = parser.parse_args(argv)
    from jacbench.core.errors import ConfigError
    from jacbench.core.registry import load_registry
    from jacbench.testing import Outcome, run_contract

    registry = load_registry()
    for name in args.names:
        try:
            registry.get(name)
        except ConfigError as exc:
            print(f"jacbench.check: {exc}", file=sys.stderr)
            return 2
    failed = 0
    for name in args.names:
        for result in run_contract(name, registry):
            detail = f": {result.detail}" if result.detail else ""
            print(f"{name} {result.check} {result.outcome.value}{detail}")
            failed += result.outcome is Outcome.FAILED
    print(f"{failed} failed" if failed else "all checks passed or skipped with a reason")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
