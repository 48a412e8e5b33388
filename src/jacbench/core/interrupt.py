"""Ctrl-C stops the job, also when a library turns the interrupt into something else.

Python raises SIGINT as a KeyboardInterrupt at whatever bytecode runs next. When that is
inside a ``torch.func`` transform, functorch's C++ clean-up can raise its own RuntimeError
in its place (``!dynamicLayerStack.empty() INTERNAL ASSERT FAILED``), which reads as a
failure; a library's bare ``except:`` or a ``__del__`` can swallow it. While ``watched`` is
active, SIGINT is also remembered, so the job can tell an interrupt from a failure; SIGTERM
and SIGHUP stop the job the same way (``Terminated``), so a sweep killed by SLURM closes its
records.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_received = 0  # the signal that arrived while watched (0: none)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what SLURM sends at preemption and at its time limit) or SIGHUP (the terminal
    went away): stopped like Ctrl-C, with the signal's own exit code (128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupt_for(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum in (0, signal.SIGINT) else Terminated(signum)


def _remember(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum
    if signum == signal.SIGINT:
        signal.default_int_handler(signum, frame)
    raise Terminated(signum)


# Signals taken over while watched, and the disposition each must have for that: Python's
# own handler for SIGINT, the default (terminate) for the others. One that is ignored (nohup,
# a background job) stays ignored.
STOPPING = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
}


@contextlib.contextmanager
def watched() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP remembered for the duration and raised as interrupts. Only
    in the main thread, and only where the signal has its usual disposition."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOPPING}
    taken = [s for s, usual in STOPPING.items() if previous[s] is usual]
    for s in taken:
        signal.signal(s, _remember)
    try:
        yield
    finally:
        _received = 0  # cleared on the way out: a later job (tests, the library) starts clean
        for s in taken:
            signal.signal(s, previous[s])


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or cause.__context__


def check(*_: object) -> None:
    """Raise the KeyboardInterrupt of a SIGINT that something swallowed. Its signature fits
    ``torch.utils.benchmark.Timer.blocked_autorange(callback=...)``, run after each block."""
    if _received:
        raise interrupt_for(_received)


def raise_if_interrupt(exc: Exception) -> None:
    """``exc`` came of a Ctrl-C (SIGINT arrived, or a KeyboardInterrupt is in its chain):
    raise the KeyboardInterrupt it stands for instead of recording a failure."""
    if _received:
        raise interrupt_for(_received) from exc
    for cause in _chain(exc):
        if isinstance(cause, KeyboardInterrupt):
            raise interrupt_for(getattr(cause, "signum", 0)) from exc
