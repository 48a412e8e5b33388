"""``python -m jacbench.sync [RESULTS]``: the command; the work is ``jacbench.record.sync``."""

from jacbench.record.sync import main

if __name__ == "__main__":
    raise SystemExit(main())
