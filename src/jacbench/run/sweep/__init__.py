"""Sweeps (``python -m jacbench -m ...``): their state files, opening, summary, answer, and
life in the launching process."""
