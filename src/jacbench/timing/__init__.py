"""Measuring a prepared Jacobian: timing and memory, and whether two timings can be told apart."""
