"""What a ``spawn``ed worker runs in the library's tests: importable by name in a fresh
interpreter (a test module's own functions are not)."""

from __future__ import annotations

import torch
from torch import nn


def network() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 5)).double()


def jacobian_there(prep, x: torch.Tensor) -> torch.Tensor:
    """``prep(x)`` in the worker: the prepared Jacobian crossed the process boundary."""
    return prep(x)
