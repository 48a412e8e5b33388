"""``python -m jacbench``: the tracking helper starts before torch is imported, the garbage
collector waits until start-up is over, and the command ends without tearing down the
interpreter (issue 29)."""

import sys

from jacbench.core import gc_pause

gc_pause.pause()  # resumed before anything is timed (jacbench.run.runner)

from jacbench.record.tracker import maybe_start  # noqa: E402
from jacbench.run.exit import exit_now  # noqa: E402

maybe_start(sys.argv[1:])  # MLflow imported in a helper process while torch imports here

from jacbench.run.app import main  # noqa: E402

try:
    main()
except SystemExit as stop:
    exit_now(stop.code)
exit_now(0)
