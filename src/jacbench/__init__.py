"""jacbench: measure how to compute a Jacobian in PyTorch (speed, memory, accuracy).

``jacbench.prepare(f, x0, strategy="auto")`` prepares a reusable Jacobian with any registered
strategy; ``jacbench.jacobian(f, x)`` computes one once; ``jacbench.FlatParams`` views a
module's parameters as the flat vector a fitting loop updates.
"""

from jacbench.api import jacobian, prepare
from jacbench.params import FlatParams
from jacbench.prepared import PointMismatch, Prepared, PrepInfo

__version__ = "0.1.0"
__all__ = [
    "FlatParams",
    "PointMismatch",
    "PrepInfo",
    "Prepared",
    "__version__",
    "jacobian",
    "prepare",
]
