"""An action repeated in the background while a block runs (a claim's heartbeat, a SLURM
launch's report of pending tasks)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def every(seconds: float, action: Callable[[], None], name: str) -> Iterator[None]:
    """Run ``action`` every ``seconds`` while the body runs, in a daemon thread (it never
    keeps a process alive, and stops with the process), first after ``seconds``."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            action()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
