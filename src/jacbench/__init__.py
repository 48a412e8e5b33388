"""jacbench: measure how to compute a Jacobian in PyTorch (speed, memory, accuracy).

``jacbench.prepare(f, x0, strategy="auto")`` prepares a reusable Jacobian with any registered
strategy; ``jacbench.jacobian(f, x)`` computes one once; ``jacbench.FlatParams`` views a
module's parameters as the flat vector a fitting loop updates.

These names are imported on first use (PEP 562), so what needs no torch (``python -m
jacbench.report``, reading results) does not pay for importing it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jacbench.api import jacobian, prepare
    from jacbench.core.params import FlatParams
    from jacbench.core.prepared import NonFiniteJacobian, PointMismatch, Prepared, PrepInfo

__version__ = "0.1.0"
_HOMES = {
    "FlatParams": "jacbench.core.params",
    "NonFiniteJacobian": "jacbench.core.prepared",
    "PointMismatch": "jacbench.core.prepared",
    "PrepInfo": "jacbench.core.prepared",
    "Prepared": "jacbench.core.prepared",
    "jacobian": "jacbench.api",
    "prepare": "jacbench.api",
}
__all__ = [
    "FlatParams",
    "NonFiniteJacobian",
    "PointMismatch",
    "PrepInfo",
    "Prepared",
    "__version__",
    "jacobian",
    "prepare",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'jacbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
