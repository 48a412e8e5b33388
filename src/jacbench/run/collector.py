"""The garbage collector of the ``jacbench`` command, through the public ``gc`` API.

Start-up's imports make millions of long-lived objects that each full collection walks
again: the collector is off during start-up, then on (start-up's objects frozen) before
Hydra composes the job; a single run turns it off to record, and the command freezes what
it made at its end. CONTRIBUTING.md ("Machinery").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Collector:
    """What this command does with the collector (``managed=False``: as the caller set it)."""

    managed: bool = False

    @classmethod
    def off_for_start_up(cls) -> Collector:
        """Off from now on, unless the caller had already turned it off (their choice)."""
        managed = gc.isenabled()
        gc.disable()
        return cls(managed)

    def start_work(self) -> None:
        """Start-up is over: freeze what it made and collect from now on."""
        if self.managed:
            gc.freeze()
            gc.enable()

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        """Off for the body (a single run's recording: imports of pyarrow and MLflow)."""
        if not self.managed:
            yield
            return
        gc.disable()
        try:
            yield
        finally:
            gc.enable()

    def end(self) -> None:
        """The command is over: what it made is never walked again (teardown included)."""
        if self.managed:
            gc.freeze()
