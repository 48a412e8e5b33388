"""Ctrl-C stops the job, also when a library turns the interrupt into something else.

Python raises SIGINT as a KeyboardInterrupt at whatever bytecode runs next. When that is
inside a ``torch.func`` transform, functorch's C++ clean-up can raise its own RuntimeError
in its place (``!dynamicLayerStack.empty() INTERNAL ASSERT FAILED``: 14 of 3000 interrupts
of a timed ``jacrev`` here), and the job was recorded as failed; a library's bare ``except:``
or a ``__del__`` can swallow it, and the job went on timing. While ``watched`` is active,
SIGINT is also remembered, so the job can tell an interrupt from a failure.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_received = False


def _remember(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = True
    signal.default_int_handler(signum, frame)


@contextlib.contextmanager
def watched() -> Iterator[None]:
    """SIGINT remembered for the duration. Only where Python's own handler is in place, in
    the main thread: a process started with SIGINT ignored (``nohup``, ``&``) keeps that."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, _remember)
    try:
        yield
    finally:
        _received = False  # cleared on the way out: a later job (tests, the library) starts clean
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


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
        raise KeyboardInterrupt


def raise_if_interrupt(exc: Exception) -> None:
    """``exc`` came of a Ctrl-C (SIGINT arrived, or a KeyboardInterrupt is in its chain):
    raise the KeyboardInterrupt it stands for instead of recording a failure."""
    if _received or any(isinstance(cause, KeyboardInterrupt) for cause in _chain(exc)):
        raise KeyboardInterrupt from exc
