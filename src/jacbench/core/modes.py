"""The autograd modes a Jacobian is computed in, whatever the caller's.

A caller may call a prepared Jacobian inside ``torch.inference_mode()`` (where autograd
records nothing: every AD Jacobian would be zeros), ``torch.no_grad()`` or an autocast
region (where matmuls run in a lower precision than the dtype asked for). The Jacobian's
own computation leaves inference mode and autocast for its duration and enables grad where
it differentiates; a point made under inference mode is copied out of it first. The
caller's modes are as they were when the call returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

AUTOCAST = ("cpu", "cuda", "xpu", "mps")  # the device types autocast has a mode for


@contextlib.contextmanager
def plain_autograd(device: torch.device) -> Iterator[None]:
    """Neither inference mode nor autocast (on ``device``'s type) inside; grad mode kept."""
    with contextlib.ExitStack() as stack:
        if torch.is_inference_mode_enabled():
            stack.enter_context(torch.inference_mode(False))
        if device.type in AUTOCAST and torch.is_autocast_enabled(device.type):
            stack.enter_context(torch.autocast(device.type, enabled=False))
        yield


def usable(x: torch.Tensor) -> torch.Tensor:
    """``x``, or a copy of it where it was made under inference mode (autograd cannot save
    an inference tensor); call inside ``plain_autograd``."""
    return x.clone() if x.is_inference() else x
