"""jacbench: measure how to compute a Jacobian in PyTorch (speed, memory, accuracy).

``jacbench.jacobian(f, x, strategy="auto")`` computes one with any registered strategy.
"""

from jacbench.api import jacobian

__version__ = "0.1.0"
__all__ = ["jacobian", "__version__"]
