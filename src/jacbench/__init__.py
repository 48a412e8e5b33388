"""jacbench: measure how to compute a Jacobian in PyTorch (speed, memory, accuracy)."""

__version__ = "0.1.0"
