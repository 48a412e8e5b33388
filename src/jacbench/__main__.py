"""``python -m jacbench``: the tracking helper starts before torch is imported, and the
command ends without tearing down the interpreter (issue 29)."""

import sys

from jacbench.record.tracker import maybe_start
from jacbench.run.exit import exit_now

maybe_start(sys.argv[1:])  # MLflow imported in a helper process while torch imports here

from jacbench.run.app import main  # noqa: E402

try:
    main()
except SystemExit as stop:
    exit_now(stop.code)
exit_now(0)
