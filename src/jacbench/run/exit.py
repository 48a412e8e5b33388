"""Ending the command once everything is written: tearing down an interpreter that imported
torch, Hydra and pyarrow takes ~0.85 s on a 2-core machine (a single run's wall 5.5 s, 4.6 s
without it) and does nothing for the user. Files are flushed and atexit handlers run first;
where a non-daemon thread still works, or the exit code is not a number, Python exits as usual.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading


def exit_now(code: object) -> None:
    """Exit with ``code`` at once (see the module's docstring), else raise SystemExit(code)."""
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if busy or not (code is None or isinstance(code, int)):
        raise SystemExit(code)
    atexit._run_exitfuncs()  # MLflow's and the logging module's own handlers among them
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            stream.flush()
    os._exit(code or 0)
