"""The garbage collector of the ``jacbench`` command (``python -m jacbench``), through the
public ``gc`` API.

Importing torch, Hydra and the strategies, and later pyarrow and MLflow, makes millions of
objects that live as long as the process, and Python's cyclic collector walks all of them at
each of the dozens of full collections those imports trigger; the interpreter's teardown
walks them again. The command therefore starts with the collector off, turns it on (start-up's
objects frozen, as the ``gc`` docs advise for long-lived objects) before Hydra composes the
job and anything is measured, so a job measures as a user's process runs; a single run
turns it off again to record (parquet, MLflow), and the command freezes what it made at its
end, so that teardown leaves it to the operating system. What it buys, measured side by
side, is listed in CONTRIBUTING.md ("Machinery").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Collector:
    """What this command does with the collector; ``managed=False`` (jacbench's ``main``
    called from Python, the tests) leaves it as the caller set it."""

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
