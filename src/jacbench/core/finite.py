"""Whether a Jacobian's entries are finite, asked without waiting for an accelerator.

On the CPU the sum of the entries is read at once (NaN and inf reach it; one kernel).
On a CUDA device reading it would wait for the device at every call, and a sub-millisecond
Jacobian then costs its launch plus its kernels back to back instead of overlapped: the sum
is copied to pinned host memory without waiting, and read at a later call once the copy is
done.
"""

from __future__ import annotations

import cmath

import torch


def finite_sum(values: torch.Tensor) -> bool:
    """Whether the sum of ``values`` is finite, read now (waits for the device)."""
    return cmath.isfinite(values.sum().item())


class LaterSum:
    """The sum of the last answer's entries on a CUDA device, readable once it arrived."""

    def __init__(self) -> None:
        self.host: torch.Tensor | None = None
        self.event: torch.cuda.Event | None = None

    def queue(self, values: torch.Tensor) -> None:
        """Copy the sum of ``values`` to the host behind the kernels queued so far."""
        host = self.host
        if host is None or host.dtype != values.dtype:
            host = torch.empty((), dtype=values.dtype, pin_memory=True)
        host.copy_(values.sum(), non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.host, self.event = host, event

    def arrived_not_finite(self) -> bool:
        """True once: when the queued sum has arrived and is NaN or infinite (read through
        locals: calls from several threads may queue meanwhile)."""
        host, event = self.host, self.event
        if host is None or event is None or not event.query():
            return False
        self.event = None
        return not cmath.isfinite(host.item())
